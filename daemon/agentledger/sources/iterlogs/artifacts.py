"""Parse the repository files a record points at, and plans' TASKS.yaml.

The reference treats a missing or broken artifact as "not available" and
never fails on it; we do the same for scoring, and the caller additionally
quarantines a broken one so it is visible.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the data model is imported by a read (parse_artifact), not by a scan
    from ...model import Artifact

VERIFIER_RESULT, REVIEW_DECISION, TASKS = "verifier_result", "review_decision", "tasks"


def resolve_artifact_path(raw: str) -> str | None:
    """Repo-relative, lexically cleaned path, or None when not resolvable (spec §2.5)."""
    p = raw.strip()
    if not p or p.startswith("/"):
        return None
    cleaned = posixpath.normpath(p)
    if cleaned == ".." or cleaned.startswith("../") or cleaned.startswith("/"):
        return None
    return cleaned


def parse_artifact(kind: str, text: str) -> Artifact:
    """Raises ``YamlError`` when the file does not decode."""
    from ...model import Artifact
    from ...reference.yamlv3.decode import Decoder, load_document  # only a read needs the YAML parser
    root = load_document(text)
    d = Decoder()
    if kind == VERIFIER_RESULT:
        m = d.mapping(root, "scoring.resultArtifact") or {}
        status = d.string(m.get("status"))
        d.raise_if_errors()
        return Artifact(kind=kind, available=True, status=status)
    if kind == REVIEW_DECISION:
        m = d.mapping(root, "scoring.reviewDecision") or {}
        pm = d.mapping(m.get("post_invocation"), "scoring.postInvocation") or {}
        corrections = len(d.str_list(pm.get("user_corrections"))) + d.int_(pm.get("retries_in_loop"))
        d.raise_if_errors()
        return Artifact(kind=kind, available=True, corrections=corrections)
    if kind == TASKS:
        m = d.mapping(root, "scoring.tasksFile") or {}
        tasks = []
        for item in d.sequence(m.get("tasks"), "[]scoring.task"):
            tm = d.mapping(item, "scoring.task")
            if tm is None:
                continue
            tasks.append((d.string(tm.get("id")), tuple(d.str_list(tm.get("write_scope")))))
        d.raise_if_errors()
        return Artifact(kind=kind, available=True, tasks=tuple(tasks))
    raise ValueError(f"unknown artifact kind {kind!r}")


__all__ = ["parse_artifact", "resolve_artifact_path",
           "VERIFIER_RESULT", "REVIEW_DECISION", "TASKS"]
