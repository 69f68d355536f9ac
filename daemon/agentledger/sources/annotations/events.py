"""The annotations source: directories of annotated trajectories (``*.md``).

A whole file is one observation (they are written in one go): its bytes are
hashed, and a new hash becomes one ``annotation.recorded`` event carrying the
parsed document (``parse``), or a ``source.quarantined`` event when
the file cannot be read as an annotation at all. An off-format file (no front
matter, or no ``taskId``) is recorded — its sections and raw front matter are
still queryable — *and* quarantined with the reason, so it shows up in
``agentledger quarantine``. Markdown that is not a trajectory (a README, a
``reviews/`` document, a synthesis) is not ingested.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from ...store.events import Event
from .. import confine

log = logging.getLogger("agentledger")
KIND = "annotation"
SKIP_DIRS = {"reviews", "node_modules", ".git"}  # reviews/<taskId>.md are a different document
_TRAJECTORY_HEADING = re.compile(r"^# Trajectory\b", re.M)


def discover(root: Path) -> list[str]:
    """Relative paths of the ``*.md`` files under ``root`` (symlinks not followed)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: log.warning("annotations: %s", e)):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in filenames:
            if name.endswith(".md") and not name.startswith("."):
                out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def is_trajectory(data: bytes) -> bool:
    """By content: a front matter first, or a ``# Trajectory`` heading near the top."""
    head = data[:4096]
    if head.startswith((b"---\n", b"---\r\n", b"\xef\xbb\xbf---")):
        return True
    return bool(_TRAJECTORY_HEADING.search(head.decode("utf-8", "replace")))


def events_for(source: str, rel: str, data: bytes, previous: str | None, sha: str | None = None) -> list[Event]:
    """The events one new content of ``rel`` stands for ([] when it is not a trajectory).
    ``previous`` (the last content hash) is part of the keys, so a file that returns to
    an earlier content is recorded again."""
    from . import parse as P

    sha = sha or hashlib.sha256(data).hexdigest()  # the caller has usually hashed it already
    stream = f"{source}:{rel}"
    base = f"annotation|{source}|{rel}|{sha}|{previous or '-'}"
    if not is_trajectory(data):
        return []
    try:
        doc = P.parse(data)
    except P.BadAnnotation as exc:
        return [quarantine(source, rel, exc.line, exc.reason, sha, base)]
    out = [Event("annotation.recorded", stream, source, base,
                 {"path": rel, "sha256": sha, "size": len(data), "document": doc.to_json()},
                 source_path=rel)]
    if doc.format_version == "off-format":
        first = doc.problems[0]
        out.append(quarantine(source, rel, first.line, first.message, sha, base))
    return out


def quarantine(source: str, rel: str, line: int | None, reason: str, sha: str | None, base: str) -> Event:
    return Event("source.quarantined", f"{source}:{rel}", source, base + "|q",
                 {"path": rel, "kind": KIND, "reason": confine.bounded(reason), "line": line, "column": None,
                  "byte_offset": None, "content_hash": f"sha256:{sha}" if sha else None},
                 source_path=rel, source_position=str(line) if line else None)


def removed(source: str, rel: str, previous: str | None) -> Event:
    return Event("file.removed", f"{source}:{rel}", source, f"annotation|{source}|{rel}|removed|{previous or '-'}",
                 {"file": rel, "kind": KIND}, source_path=rel)


def normalise_term(term: object) -> str | None:
    """Vocabulary terms are lowercase-kebab-case by convention; make near-misses meet it."""
    if not isinstance(term, str):
        return None
    t = re.sub(r"[\s_]+", "-", term.strip().lower()).strip("-")
    return t or None


def seeds(schema: Path) -> list[tuple[str, str, str]]:
    """(vocabulary, term, category) rows of ``schema/annotations/vocabulary.toml``."""
    import tomllib

    data = tomllib.loads((schema / "annotations" / "vocabulary.toml").read_text("utf-8"))
    return [(vocab, term, category) for vocab, groups in data.items()
            for category, terms in groups.items() for term in terms]
