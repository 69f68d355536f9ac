"""Agent transcripts (Claude ``~/.claude/projects/<project>/``, Codex session dirs).

Each configured directory is listed the way the reference lists it: only its
own entries (not recursive) whose name ends in ``.jsonl`` and that are not
directories, in name order. Files are tailed (``sources.jsonl``); each batch
becomes one ``transcript.turns`` event holding the turn-level facts of its
lines (time, kind, token counts, tool results and errors; never the text).
A line that is not JSON at all is quarantined; lines the reference skips
(other record types, typed-field mismatches) are skipped silently, as there.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...store.events import Event
from ..jsonl import Batch, Line, Oversize
from ..jsonl import reset_event as _reset


def discover(root: Path) -> list[str]:
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            if e.name.endswith(".jsonl") and not e.is_dir():
                out.append(e.name)
        except OSError:
            continue
    return out


def complete_line(data: bytes) -> bool:
    """Whether an unterminated last line is one whole record already: the rubric
    reads a final line that lacks its newline, and a JSON object cannot be the
    start of a longer valid line (only whitespace may follow its closing brace)."""
    import json

    body = data.strip()
    if not body.startswith(b"{") or not body.endswith(b"}"):
        return False
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


def events_for(source: str, rel: str, batch: Batch, previous: dict | None) -> list[Event]:
    from .parse import Invalid, fact
    from ..vally.events import _quarantine

    out: list[Event] = []
    if batch.reset and previous is not None:
        out.append(_reset(source, rel, batch, previous, "transcript"))
    facts = []
    for item in batch.items:
        if isinstance(item, Oversize):
            out.append(_quarantine(source, rel, item.offset, item.line_no, f"oversize-{item.length}",
                                   f"line {item.line_no} is {item.length} bytes, over the max_line_bytes limit; skipped",
                                   kind="transcript"))
            continue
        assert isinstance(item, Line)
        data = item.data[:-1] if item.data.endswith(b"\r") else item.data
        if not data:
            continue
        try:
            f = fact(data)
        except Invalid as exc:
            out.append(_quarantine(source, rel, item.offset, item.line_no, "invalid",
                                   f"line {item.line_no} is not JSON: {exc}", kind="transcript"))
            continue
        if f is not None:
            row = [item.offset, f.ts_ns, f.kind, f.input_tokens, f.output_tokens, f.cache_read,
                   f.cache_creation, f.turns, f.tool_results, f.tool_errors]
            if f.model is not None or f.cache_write_1h is not None:  # v2: what money needs
                row += [f.model, f.cache_write_1h]
            facts.append(row)
    if batch.reopened is not None:
        # an unterminated last line taken earlier turned out to continue: what it gave
        # is superseded by this batch's reading of the line at the same offset (if any)
        first = batch.reopened
        out.append(Event("transcript.turns", f"{source}:{rel}", source,
                         f"{source}|{rel}|{first}-{facts[-1][0] if facts else first}|{batch.end.fingerprint}"
                         f"|reopened@{batch.end.offset}",
                         {"file": rel, "facts": facts, "superseded": [first]}, source_path=rel,
                         source_position=f"@{first}"))
    elif facts:
        first, last = facts[0][0], facts[-1][0]
        key = f"{source}|{rel}|{first}-{last}|{batch.end.fingerprint}"
        if batch.end.open:  # its last line may be read again, longer, at the same offsets
            key += f"|open@{batch.end.offset}"
        out.append(Event("transcript.turns", f"{source}:{rel}", source, key,
                         {"file": rel, "facts": facts}, source_path=rel, source_position=f"@{first}"))
    return out
