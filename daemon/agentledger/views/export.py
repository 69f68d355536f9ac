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

from .. import names
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


# A restore leaves each whole file the export speaks of (its stream's last event not its
# removal) a checkpoint with no stat and a content hash no file has: the first scan reads
# the file again, records its content after the export's last event of it (the key ends
# with ``|after:<seq>``: ``ledger/commit.place``), and records a file that is gone as
# removed. So what the export said of a file is history; what the ledger holds of it
# now is what the file says.
RESTORED = "restored:unverified"
_WHOLE_FILE_KINDS = (names.RECORD, names.HISTORICAL, names.HOOK, names.LABELS, names.MISNAMED,
                     "verifier_result", "review_decision", "tasks", "annotation")  # (artifacts, trajectories)
_RESTORED_CHECKPOINTS = (
    "INSERT OR IGNORE INTO source_checkpoints (source, path, kind, content_hash, last_seq)"
    f" SELECT source, source_path, kind, '{RESTORED}', seq FROM (SELECT source, source_path, seq, type,"
    " CASE type WHEN 'iteration.recorded' THEN 'record' WHEN 'historical.recorded' THEN 'historical'"
    " WHEN 'hook_outcomes.recorded' THEN 'hook_outcomes' WHEN 'labels.recorded' THEN 'labels'"
    " WHEN 'artifact.recorded' THEN payload ->> '$.artifact.kind' WHEN 'annotation.recorded' THEN 'annotation'"
    " WHEN 'source.quarantined' THEN payload ->> '$.kind' END AS kind FROM events"
    " WHERE seq IN (SELECT max(seq) FROM events WHERE source_path IS NOT NULL GROUP BY stream))"
    f" WHERE kind IN {_WHOLE_FILE_KINDS!r}")


def import_lines(conn: sqlite3.Connection, lines: Iterable[str], *, batch: int = 1000,
                 progress=None, total: int = 0) -> tuple[int, int]:
    """Restore a ledger's whole export into an empty ledger; returns (read, new).

    What an import is for: re-creating a ledger from its export (a machine's disk
    replaced, a ledger moved), nothing else. So it adds events only to a ledger that
    has none, and takes only a whole export: its lines in order from seq 1 with no gap
    (an ``--after`` or ``--type`` export is a part, refused). A ledger that holds events
    takes an import only when the export brings nothing new (importing twice changes
    nothing); one new line refuses the whole import. That is what makes an import unable
    to speak for this ledger's files, whatever its lines say: a ledger that has read
    anything never takes another's events, and a restored ledger reads its files again
    at its first scan, each file's content recorded anew after the export's history
    (``_RESTORED_CHECKPOINTS``), so the file on disk, not the export, says what it holds.

    Keys, payload text, versions and times are kept as exported; the receiving
    ledger numbers the events itself. All or nothing: one transaction, so a refused
    line (a score its own breakdown contradicts, say) leaves the ledger as it was.
    ``progress(read, total)`` hears after each batch (``total``: the lines, when the
    caller counted them)."""
    from ..scoring.combine import inconsistency
    from ..store.events import CURRENT, Event, upcast
    from ..store.log import EventLog

    read = new = 0
    pending: list[Event] = []
    held = conn.execute("SELECT 1 FROM events LIMIT 1").fetchone() is not None
    expected = 1

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
                if obj["seq"] != expected or type(obj["seq"]) is not int:
                    raise ImportRefused(f"line {n}: seq {obj['seq']!r} where {expected} was due: an import takes"
                                        " a whole export (from seq 1, no gaps: not --after, not --type);"
                                        " nothing was imported")
                expected += 1
                if held and conn.execute("SELECT 1 FROM events WHERE idempotency_key = ?",
                                         (obj["idempotency_key"],)).fetchone() is None:
                    raise ImportRefused(f"line {n}: {obj['type']} {obj['idempotency_key']!r} is not in this ledger,"
                                        " which holds events already: an import restores an export into an"
                                        " empty ledger only; nothing was imported")
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
        if not held and new:
            conn.execute(_RESTORED_CHECKPOINTS)
    if progress:
        progress(read, total)
    return read, new
