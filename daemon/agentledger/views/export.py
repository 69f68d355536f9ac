"""Shipping the ledger elsewhere: events as JSON Lines, scores as CSV, and the import
that turns an export back into a ledger.

The JSON Lines format is stable (``schema/json/event-export.schema.json``): one
event per line, exactly as stored — payload text, schema version and
idempotency key untouched — so a consumer can resume from the last ``seq`` it
saw and an import is idempotent. Readers upcast old payload versions as the
ledger itself does.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from collections.abc import Iterable, Iterator
from typing import IO

from ..errors import AgentledgerError

EXPORT_FORMAT = 1
EVENT_COLUMNS = ("seq", "type", "schema_version", "stream", "source", "idempotency_key", "content_hash",
                 "occurred_at", "recorded_at", "source_path", "source_position")
_MARK = ', "payload": '  # the payload is written last, verbatim, after this
SCORE_COLUMNS = ("source", "iteration", "session_id", "task_id", "rubric_version", "scored", "value", "band",
                 "inputs_hash", "scored_at", "seq")


def event_lines(conn: sqlite3.Connection, after: int = 0, types: Iterable[str] = ()) -> Iterator[str]:
    """Events with ``seq > after`` in order, one JSON object per line (no newline). Each
    names the ledger that recorded it first (``ledger``) and its seq there
    (``origin_seq``), so an import keeps both."""
    from ..store.events import rows

    own = conn.execute("SELECT ledger_id FROM ledger_identity").fetchone()[0]
    origins = {seq: (origin, origin_seq) for seq, origin, origin_seq in conn.execute(
        "SELECT seq, origin, origin_seq FROM event_origins WHERE seq > ?", (after,))}
    for r in rows(conn, after=after, types=tuple(types)):
        ledger, origin_seq = origins.get(r["seq"], (own, r["seq"]))
        obj = {"format": EXPORT_FORMAT, **{c: r[c] for c in EVENT_COLUMNS}, "ledger": ledger}
        if origin_seq is not None:  # unknown for an event imported from an export that had none
            obj["origin_seq"] = origin_seq
        # the stored text, embedded as JSON (not re-serialised: byte-stable across versions)
        yield json.dumps(obj, ensure_ascii=False)[:-1] + _MARK + r["payload"] + "}"


def write_scores_csv(conn: sqlite3.Connection, out: IO[str], *, rubric: str | None = None) -> int:
    """Every score (all rubric versions, or one) as CSV with a header; returns rows written."""
    sql = ("SELECT s.source, s.iteration, i.session_id, i.task_id, s.rubric_version, s.scored, s.value, s.band,"
           " s.inputs_hash, e.recorded_at, s.seq FROM scores s JOIN events e ON e.seq = s.seq"
           " LEFT JOIN iterations i ON i.source = s.source AND i.iteration = s.iteration")
    args: tuple = ()
    if rubric:
        sql += " WHERE s.rubric_version = ?"
        args = (rubric,)
    w = csv.writer(out, lineterminator="\n")
    w.writerow(SCORE_COLUMNS)
    n = 0
    for row in conn.execute(sql + " ORDER BY s.source, s.iteration, s.rubric_version", args):
        w.writerow(["" if v is None else v for v in row])
        n += 1
    return n


class ImportRefused(AgentledgerError, ValueError):
    """An export line this ledger will not take (nothing of the import is kept)."""


def _payload_text(line: str, payload: object) -> str:
    """The payload's text as it was stored: ``event_lines`` writes it verbatim as the
    last member, after a header whose strings cannot hold an unescaped quote."""
    at = line.find(_MARK)
    if at >= 0:
        return line[at + len(_MARK):].rstrip().removesuffix("}")
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# A JSON string can spell half of a UTF-16 pair alone (\udc00): not text, so no source
# records one (a file that has one is quarantined) and neither SQLite's text nor the
# team ledger's JSONB can hold it. A line with such an escape is looked at closely (an
# escaped pair matches too: two halves that make one character); the shipper looks for
# the same escape in the stored payloads (``central/ship.py``).
SURROGATE_ESCAPE = r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
_SURROGATE_ESCAPE = re.compile(SURROGATE_ESCAPE)


def _lone_surrogate(obj: object) -> str | None:
    """The first lone surrogate in the parsed line's strings, as U+XXXX (a pair's two
    escapes have become one character), or None."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"U+{ord(exc.object[exc.start]):04X}"
    return None


def import_lines(conn: sqlite3.Connection, lines: Iterable[str], *, batch: int = 1000,
                 progress=None, total: int = 0) -> tuple[int, int]:
    """Append exported events (in their order) and project them; returns (read, new).

    Keys, payload text, versions and times are kept as exported; the receiving
    ledger numbers the events itself. An event already present (same idempotency
    key) is skipped, so importing twice changes nothing. All or nothing: one
    transaction, so a refused line (a score its own breakdown contradicts, say)
    leaves the ledger as it was. ``progress(read, total)`` hears after each batch
    (``total``: the lines, when the caller counted them)."""
    from ..scoring.combine import inconsistency
    from ..store.events import CURRENT, Event, upcast
    from ..store.log import EventLog

    read = new = 0
    pending: list[Event] = []

    def flush() -> int:
        """Append and project a chunk, inside the import's one transaction (its origins
        kept; its scores marked as not computed here)."""
        if not pending:
            return 0
        fresh = into.append(pending, imported=True)
        into.flush()
        pending.clear()
        return len(fresh)

    with EventLog(conn).batch() as into:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if obj.get("format") != EXPORT_FORMAT:
                    raise ImportRefused(f"line {n}: not an agentledger event export"
                                       f" (format {obj.get('format')!r})")
                if obj["type"] not in CURRENT:
                    raise ImportRefused(f"line {n}: event type {obj['type']!r} is unknown to this version")
                if _SURROGATE_ESCAPE.search(line) and (lone := _lone_surrogate(obj)):
                    raise ImportRefused(f"line {n}: a string holds a lone surrogate ({lone}), which is not text;"
                                        " nothing was imported")
                stored = _payload_text(line, obj["payload"])
                origin_seq = obj.get("origin_seq")
                if origin_seq is not None and (type(origin_seq) is not int or origin_seq < 1):
                    raise ValueError(f"origin_seq must be a positive integer, not {origin_seq!r}")
                payload = upcast(obj["type"], obj["schema_version"], obj["payload"])
                if obj["type"] == "score.computed" and (why := inconsistency(payload)) is not None:
                    raise ImportRefused(f"line {n}: score.computed {obj['idempotency_key']!r} (iteration"
                                       f" {payload.get('iteration')}) refused: {why}; nothing was imported")
                ev = Event(obj["type"], obj["stream"], obj["source"], obj["idempotency_key"], payload,
                           content_hash=obj["content_hash"], source_path=obj.get("source_path"),
                           source_position=obj.get("source_position"), occurred_at=obj.get("occurred_at"),
                           schema_version=obj["schema_version"], recorded_at=obj["recorded_at"],
                           extra={"json": stored, "origin": obj.get("ledger"), "origin_seq": origin_seq})
            except (KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, ImportRefused):
                    raise
                raise ImportRefused(f"line {n}: {type(exc).__name__}: {exc}") from None
            pending.append(ev)
            read += 1
            if len(pending) >= batch:
                new += flush()
                if progress:
                    progress(read, total)
        new += flush()
    if progress:
        progress(read, total)
    return read, new
