"""The vally source: ``results.jsonl`` and ``run-summary.jsonl`` under watched directories.

A run is one directory holding a ``results.jsonl`` (a plain ``vally eval``, or
one variant of an experiment). Each file is tailed (``sources.jsonl``); each
line becomes a ``trial.completed`` or ``run.summarized`` event that keeps the
normalised facts and points at the raw bytes (path, offset, length, sha256),
or a ``source.quarantined`` event with the byte offset and line number.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from ...store.events import Event
from .. import confine
from ..jsonl import Batch, Line, Oversize, reset_event

log = logging.getLogger("agentledger")
FILES = ("results.jsonl", "run-summary.jsonl")


def discover(root: Path) -> list[str]:
    """Relative paths of every results/run-summary file under ``root`` (symlinks not followed)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: log.warning("vally: %s", e)):
        dirnames.sort()
        for name in FILES:
            if name in filenames:
                out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def events_for_with_trajectories(source: str, rel: str, batch: Batch, previous: dict | None) -> list[Event]:
    return events_for(source, rel, batch, previous, trajectories=True)


def events_for(source: str, rel: str, batch: Batch, previous: dict | None, *,
               trajectories: bool = False) -> list[Event]:
    """The events one tailed batch of ``rel`` stands for (keys make re-reads harmless).
    With ``trajectories``, trials also carry turn facts from their trajectory events."""
    from pydantic_core import to_json

    from . import parse as P

    run_dir = os.path.dirname(rel) or "."
    stream = f"{source}:{rel}"
    out: list[Event] = []
    if batch.reset and previous is not None:
        out.append(reset_event(source, rel, batch, previous, "vally"))
    for item in batch.items:
        if isinstance(item, Oversize):
            out.append(_quarantine(source, rel, item.offset, item.line_no, f"oversize-{item.length}",
                                   f"line {item.line_no} is {item.length} bytes, over the max_line_bytes limit; skipped"
                                   if item.ended else
                                   f"line {item.line_no} is over the max_line_bytes limit ({item.length} bytes and no"
                                   " end yet); skipped to its newline, and the lines after it are read"))
            continue
        assert isinstance(item, Line)
        data = item.data.rstrip(b"\r")
        if not data.strip():
            continue
        sha = hashlib.sha256(data).hexdigest()
        raw = {"path": rel, "offset": item.offset, "length": len(item.data), "sha256": sha}
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.append(_quarantine(source, rel, item.offset, item.line_no, sha,
                                   f"invalid UTF-8 at byte {exc.start} of line {item.line_no}"))
            continue
        try:
            kind, facts = P.parse(data)
            if kind == "trial":
                assert facts is not None
                payload = {"run_dir": run_dir, "file": rel, "trial": facts, "raw": raw}
                if trajectories:
                    payload["facts"] = P.trajectory_facts(data, item.offset)
                # pydantic-core's encoder: same compact text as canonical_json for these
                # plain values (finite floats, checked), ~4x faster on the bulk path.
                out.append(Event("trial.completed", stream, source,
                                 f"vally|{source}|{run_dir}|{facts['item_id']}|{sha}"
                                 + ("|turns" if trajectories else ""), payload,
                                 source_path=rel, source_position=f"@{item.offset}",
                                 extra={"json": to_json(payload).decode()}))
            elif kind in ("run-summary", "experiment-run-summary"):
                out.append(Event("run.summarized", stream, source, f"vally|{source}|{rel}|summary|{sha}",
                                 {"run_dir": run_dir, "file": rel, "summary": facts, "raw": raw},
                                 source_path=rel, source_position=f"@{item.offset}"))
            else:
                log.info("vally: %s line %d: record type %s skipped", rel, item.line_no, kind[6:])
        except P.BadLine as exc:
            out.append(_quarantine(source, rel, item.offset, item.line_no, sha, str(exc)))
    return out


def _quarantine(source: str, rel: str, offset: int, line_no: int, tag: str, reason: str,
                kind: str = "vally") -> Event:
    return Event("source.quarantined", f"{source}:{rel}", source, f"{source}|{rel}|{offset}|{tag}|q",
                 {"path": rel, "kind": kind, "reason": confine.bounded(reason), "line": line_no, "column": None,
                  "byte_offset": offset, "content_hash": None},
                 source_path=rel, source_position=f"{line_no}@{offset}")
