"""Parse the per-iteration side files: hook outcomes and human labels.

Both feed score details verbatim, including their error texts, so decoding
follows yaml.v3 (see ``goyaml``) and validation messages follow the reference
(``scoring-rubric.md`` §4.6, ``rubric-3.0.0-human-label.md`` §3).
"""

from __future__ import annotations

from datetime import datetime, timezone

from ...reference.yamlv3.decode import Decoder, YamlError, budget_for, load_document
from ...model import HookOutcomes, HookRecord, Judgement, Label, Labels

_HOOK_FIELDS = ("intervention_class", "result", "rule_id", "correlation_id")


def parse_hook_outcomes(text: str) -> HookOutcomes:
    """Never raises: a decode failure is carried as the ``error`` text."""
    try:
        root = load_document(text)
        d = Decoder(budget_for(text))
        m = d.mapping(root, "scoring.hookOutcomeSidecar") or {}
        records = []
        for item in d.sequence(m.get("records"), "[]scoring.hookOutcomeRecord"):
            rm = d.mapping(item, "scoring.hookOutcomeRecord")
            if rm is None:
                continue
            records.append(HookRecord(**{k: d.string(rm.get(k)) for k in _HOOK_FIELDS}))
        d.raise_if_errors()
    except YamlError as exc:
        return HookOutcomes(error=exc.message)
    return HookOutcomes(records=tuple(records))


_ROLES = ("reviewer", "admin", "readonly")
_SCOPE = ("on-target", "partial", "breach")
_HALLU = ("none", "minor", "major")
_ZERO_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)


def _q(s: str) -> str:
    from ...reference.fmt import go_quote

    return go_quote(s)


def parse_labels(text: str, n: int) -> Labels:
    """Decode and validate ``iter-{n}.labels.yaml``; failures become ``error``."""
    try:
        root = load_document(text)
        d = Decoder(budget_for(text))
        m = d.mapping(root, "labels.Sidecar") or {}
        file_iter = d.int_(m.get("iteration"))
        file_schema = d.string(m.get("schema_version"))
        raw_labels = []
        for item in d.sequence(m.get("labels"), "[]labels.Label"):
            lm = d.mapping(item, "labels.Label")
            if lm is None:
                continue
            history = []
            for h in d.sequence(lm.get("history"), "[]labels.Edit"):
                hm = d.mapping(h, "labels.Edit")
                if hm is None:
                    continue
                sm = d.mapping(hm.get("structured"), "labels.Structured") or {}
                history.append(
                    {
                        "actor": d.string(hm.get("actor")),
                        "role": d.string(hm.get("role")),
                        "free_text": d.string(hm.get("free_text")),
                        "j": Judgement(
                            correctness=d.int_(sm.get("correctness")),
                            scope_judgement=d.string(sm.get("scope_judgement")),
                            hallucination=d.string(sm.get("hallucination")),
                        ),
                        "ts": d.timestamp(hm.get("timestamp")),
                    }
                )
            raw_labels.append(
                {
                    "id": d.string(lm.get("id")),
                    "iteration": d.int_(lm.get("iteration")),
                    "actor": d.string(lm.get("actor")),
                    "role": d.string(lm.get("role")),
                    "admin_override": d.bool_(lm.get("admin_override")),
                    "schema_version": d.string(lm.get("schema_version")),
                    "created_at": d.timestamp(lm.get("created_at")),
                    "updated_at": d.timestamp(lm.get("updated_at")),
                    "history": history,
                }
            )
        d.raise_if_errors()
    except YamlError as exc:
        return Labels(error=f"labels: parse iter-{n} sidecar: {exc.message}")
    problem = _validate(file_iter, file_schema, raw_labels)
    if problem:
        return Labels(error=f"labels: invalid iter-{n} sidecar: labels: {problem}")
    labels = tuple(
        Label(
            id=lb["id"],
            actor=lb["actor"],
            admin_override=lb["admin_override"],
            schema_version=lb["schema_version"],
            updated_at=lb["updated_at"].isoformat(),
            last=lb["history"][-1]["j"],
        )
        for lb in raw_labels
    )
    return Labels(schema_version=file_schema, labels=labels)


def _validate(file_iter: int, file_schema: str, labels: list[dict]) -> str:
    if file_iter < 0:
        return "iteration is negative"
    if not file_schema.strip():
        return "schema_version is empty"
    seen: set[str] = set()
    for lb in labels:
        if not lb["id"].strip():
            return "label id is empty"
        if not lb["actor"].strip():
            return "label actor is empty"
        if lb["role"] not in _ROLES:
            return f"invalid role: {_q(lb['role'])}"
        if lb["iteration"] < 0:
            return "iteration is negative"
        if not lb["schema_version"].strip():
            return "schema_version is empty"
        if not lb["history"]:
            return "label has no edit history"
        for h in lb["history"]:
            if not h["actor"].strip():
                return "label actor is empty"
            if h["role"] not in _ROLES:
                return f"invalid role: {_q(h['role'])}"
            size = len(h["free_text"].encode("utf-8"))
            if size > 4000:
                return f"free_text exceeds max length: {size} > 4000"
            j: Judgement = h["j"]
            if not 0 <= j.correctness <= 3:
                return f"correctness out of range: {j.correctness} (want 0..3)"
            if j.scope_judgement not in _SCOPE:
                return f"invalid scope_judgement: {_q(j.scope_judgement)}"
            if j.hallucination not in _HALLU:
                return f"invalid hallucination: {_q(j.hallucination)}"
        if lb["iteration"] != file_iter:
            return (f"label iteration does not match sidecar: label {lb['id']} "
                    f"iteration {lb['iteration']} != sidecar {file_iter}")
        if lb["id"] in seen:
            return f"duplicate label id: {lb['id']}"
        seen.add(lb["id"])
    return ""

