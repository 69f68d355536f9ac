"""One function per signal: ScoringInputs → SignalValue (present, sub-score, detail).

Each follows ``scoring-rubric.md`` §4 (and ``rubric-3.0.0-human-label.md`` §4
for ``human_label``), including the exact Detail texts, which are part of the
sidecar contract. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ..reference.fmt import fixed, go_quote, short
from ..model import Labels, maker
from .inputs import ScoringInputs


@dataclass(frozen=True)
class SignalValue:
    present: bool
    sub_score: float
    detail: str


_value = maker(SignalValue)  # SignalValue(present, sub_score, detail), made faster: see ``maker``


def present(sub: float, detail: str) -> SignalValue:
    """A present value; the sub-score is clamped into [0, 1] (NaN passes through)."""
    if sub < 0:
        sub = 0.0
    elif sub > 1:
        sub = 1.0
    return _value(True, sub, detail)


def absent(detail: str) -> SignalValue:
    return _value(False, 0.0, detail)


# -- landed (§4.1) -------------------------------------------------------------
def landed(x: ScoringInputs) -> SignalValue:
    f, trunk = x.landed, x.trunk
    if not f.raw:
        return absent("no commit SHA on iteration entry")
    if not f.resolved:
        if f.matched:
            if f.matched_reverted_by:
                return present(0.0, f"unresolved SHA {short(f.raw)}; message-matched "
                                    f"{short(f.matched)}, later reverted by {short(f.matched_reverted_by)}")
            return present(1.0, f"unresolved SHA {short(f.raw)}; message-matched "
                                f"{short(f.matched)} reachable from {trunk}")
        return absent(f"commit SHA {short(f.raw)} does not resolve and no message match")
    if not f.reachable:
        return present(0.0, f"commit {short(f.resolved)} not reachable from {trunk}")
    if f.reverted_by:
        return present(0.0, f"commit {short(f.resolved)} reachable but reverted by {short(f.reverted_by)}")
    return present(1.0, f"commit {short(f.resolved)} reachable from {trunk}, not reverted")


# -- verifier (§4.2) -----------------------------------------------------------
_STATUS = {"pass": 1.0, "partial": 0.5, "fail": 0.0}


def verifier(x: ScoringInputs) -> SignalValue:
    r = x.record
    if not r.verifiers:
        t = r.impl.tests_total_pass
        if t is True:
            return present(1.0, "no verifiers; tests_total_pass proxy: pass")
        if t is False:
            return present(0.0, "no verifiers; tests_total_pass proxy: fail")
        return absent("no verifier records and no tests_total_pass proxy")
    counted, total = 0, 0.0
    arts = x.verifier_artifacts
    for i, v in enumerate(r.verifiers):
        status = v.status
        art = arts[i] if i < len(arts) else None
        if art is not None and art.available and art.status.strip():
            status = art.status
        value = _STATUS.get(status.strip().lower())
        if value is not None:
            counted += 1
            total += value
    if counted == 0:
        return absent("verifier records carry no pass/fail/partial status")
    return present(total / counted, f"{counted}/{len(r.verifiers)} verifiers scored, mean status")


# -- tests (§4.3) --------------------------------------------------------------
def tests(x: ScoringInputs) -> SignalValue:
    r = x.record
    flags = [r.impl.focused_tests_pass, r.impl.tests_total_pass, *(v.tests_total_pass for v in r.verifiers)]
    set_flags = [f for f in flags if f is not None]
    if not set_flags:
        return absent("no test-pass flags set in iteration log")
    true_count = sum(1 for f in set_flags if f)
    return present(true_count / len(set_flags), f"{true_count}/{len(set_flags)} test-pass flags true")


# -- correction_pressure (§4.4) --------------------------------------------------
def correction_pressure(x: ScoringInputs) -> SignalValue:
    r = x.record
    retries = r.impl.retries + sum(v.retries for v in r.verifiers)
    art = x.review_artifact
    corrections = art.corrections if art is not None and art.available else 0
    friction = float(retries) + float(corrections)
    detail = f"{retries} retries, {corrections} user corrections"
    if x.tool_error_rate is not None:
        friction += 2.0 * x.tool_error_rate
        detail += f", {fixed(x.tool_error_rate * 100, 0)}% tool-error rate"
    denom = 1.0 + friction
    if denom == 0.0:
        sub = math.copysign(math.inf, denom)
    else:
        sub = 1.0 / denom
    return present(sub, detail)


# -- scope (§4.5) --------------------------------------------------------------
def _clean(p: str) -> str:
    c = posixpath.normpath(p)
    return "/" + c.lstrip("/") if c.startswith("//") else c


def _in_scope(path: str, scope: tuple[str, ...]) -> bool:
    f = _clean(path)
    for entry in scope:
        e = entry.strip()
        if not e:
            continue
        ce = _clean(e)
        if f == ce:
            return True
        if e.endswith("/") and f.startswith(ce.rstrip("/") + "/"):
            return True
    return False


def scope_objective(x: ScoringInputs) -> SignalValue:
    f = x.landed
    if not f.raw:
        return absent("no commit SHA on iteration entry")
    if not f.resolved:
        return absent(f"commit SHA {short(f.raw)} does not resolve")
    task = x.record.task_id
    if x.write_scope is None:
        return absent(f"no write_scope declared for task {go_quote(task)}")
    if x.changed_files is None:
        return absent(f"cannot read changed files for {short(f.resolved)}")
    if not x.changed_files:
        return present(1.0, f"commit {short(f.resolved)} changed no files")
    inside = sum(1 for p in x.changed_files if _in_scope(p, x.write_scope))
    total = len(x.changed_files)
    return present(inside / total,
                   f"{inside}/{total} changed files within declared write_scope of task {go_quote(task)}")


def scope_self_reported(x: ScoringInputs) -> SignalValue:
    note = x.record.impl.scope_note.strip()
    if not note:
        return absent("no scope_note in iteration log")
    low = note.lower()
    if low == "on-target":
        return present(1.0, "scope_note: on-target")
    if low == "partial":
        return present(0.5, "scope_note: partial")
    if low == "scope-breach":
        return present(0.0, "scope_note: scope-breach")
    if low.startswith("on-target"):
        return present(1.0, "scope_note: free-text with on-target prefix")
    return absent("unrecognized free-text scope_note")


def scope(x: ScoringInputs, objective: SignalValue | None = None) -> SignalValue:
    """``objective``: ``scope_objective(x)`` when the caller has it (the integrity track
    needs it too: ``combine.score`` computes it once)."""
    if objective is None:
        objective = scope_objective(x)
    return objective if objective.present else scope_self_reported(x)


# -- hook_outcomes (§4.6) --------------------------------------------------------
_SCORED_CLASSES = ("prevent_before_action", "remediate_at_stop")
_SEVERITY = {"remediate": 2, "advise": 1, "allow": 0}


def _ids(ids: list[str]) -> str:
    return ", ".join(sorted(set(ids), key=lambda s: s.encode("utf-8")))


def hook_outcomes(x: ScoringInputs) -> SignalValue:
    n = x.record.iteration
    h = x.hook
    if h is None:
        return absent(f"no hook-outcomes sidecar for iter-{n}")
    if h.error:
        verb = "read" if h.read_error else "parse"
        return absent(f"cannot {verb} hook-outcomes sidecar for iter-{n}: {h.error}")
    scored = [r for r in h.records if r.intervention_class in _SCORED_CLASSES]
    if not scored:
        return absent(f"no scored hook-outcome records for iter-{n} "
                      "(continuity_advice/observe_tool_result are deferred)")
    # D4 collapse: one entry per (correlation_id, rule_id), keeping the most severe result.
    kept: list[list[str]] = []  # [rule_id, result]
    by_key: dict[tuple[str, str], list[str]] = {}
    for r in scored:
        if not r.correlation_id:
            kept.append([r.rule_id, r.result])
            continue
        key = (r.correlation_id, r.rule_id)
        entry = by_key.get(key)
        if entry is None:
            entry = [r.rule_id, r.result]
            by_key[key] = entry
            kept.append(entry)
        elif _SEVERITY.get(r.result, -1) > _SEVERITY.get(entry[1], -1):
            entry[1] = r.result
    groups: dict[str, list[str]] = {"remediate": [], "advise": [], "allow": []}
    for rule_id, result in kept:
        if result in groups:
            groups[result].append(rule_id)
    if groups["remediate"]:
        return present(0.0, f"remediate: {_ids(groups['remediate'])}")
    if groups["advise"]:
        return present(0.6, f"advise: {_ids(groups['advise'])}")
    if groups["allow"]:
        return present(1.0, f"allow: {_ids(groups['allow'])} ({len(groups['allow'])} records)")
    return absent("hook-outcome records had no recognised result value")


# -- human_label (3.0.0 §4) ------------------------------------------------------
_SCOPE_J = {"on-target": 1.0, "partial": 0.5, "breach": 0.0}
_HALLU = {"none": 1.0, "minor": 0.5, "major": 0.0}


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def human_label(x: ScoringInputs) -> SignalValue:
    n = x.record.iteration
    lab: Labels | None = x.labels
    if lab is not None and lab.error:
        return absent(f"cannot read labels sidecar for iter-{n}: {lab.error}")
    if lab is None or not lab.labels:
        return absent(f"no human labels for iter-{n}")
    for v in (lab.schema_version, *(lb.schema_version for lb in lab.labels)):
        if _major(v) != "1":
            return absent(f"unsupported label schema {go_quote(v)} for iter-{n} "
                          "(this rubric scores major 1 only)")
    overrides = [lb for lb in lab.labels if lb.admin_override]
    pool = overrides or list(lab.labels)
    latest: dict[str, object] = {}
    for lb in pool:
        kept = latest.get(lb.actor)
        if kept is None or not (datetime.fromisoformat(kept.updated_at)  # type: ignore[attr-defined]
                                > datetime.fromisoformat(lb.updated_at)):
            latest[lb.actor] = lb
    actors = sorted(latest, key=lambda a: a.encode("utf-8"))
    total = 0.0
    for a in actors:  # ascending byte order: the reference's map order is random
        j = latest[a].last  # type: ignore[attr-defined]
        total += ((j.correctness / 3) + _SCOPE_J.get(j.scope_judgement, 0.0)
                  + _HALLU.get(j.hallucination, 0.0)) / 3
    sub = total / len(actors)
    names = ", ".join(actors)
    if overrides:
        return present(sub, f"admin override by {names}")
    return present(sub, f"mean of {len(actors)} latest label(s) by {names}")


# -- token_efficiency (§4.7) -----------------------------------------------------
def token_efficiency(x: ScoringInputs) -> SignalValue:
    if x.commit_time is None:
        return absent("commit time unresolvable; cannot window the transcript")
    tokens = x.record.session_tokens
    if tokens is not None:
        rate = tokens.cache_hit_rate
        return present(rate, f"native session_tokens: cache_hit_rate {fixed(rate, 3)}")
    t = x.transcript
    if t is not None and t.turns > 0:
        denominator = t.cache_read + t.cache_creation  # integer sums, as the reference
        rate = t.cache_read / denominator if denominator > 0 else 0.0
        return present(rate, f"backfilled from {t.turns} transcript turn(s): cache_hit_rate {fixed(rate, 3)}")
    return absent("no transcript covers the iteration window")


MEASURES: dict[str, Callable[[ScoringInputs], SignalValue]] = {
    "landed": landed,
    "verifier": verifier,
    "tests": tests,
    "human_label": human_label,
    "correction_pressure": correction_pressure,
    "scope": scope,
    "hook_outcomes": hook_outcomes,
    "token_efficiency": token_efficiency,
}
