"""The event log: append (idempotent), read (upcast on read, never rewritten).

An event is immutable once appended; the table's triggers enforce it. Each
carries the schema version of its payload; readers upcast old versions to the
current shape through ``UPCASTERS`` so stored rows never change.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

# Current payload version of each event type.
CURRENT: dict[str, int] = {
    "iteration.recorded": 1,
    "historical.recorded": 1,
    "hook_outcomes.recorded": 1,
    "labels.recorded": 1,
    "artifact.recorded": 1,
    "file.removed": 1,
    "source.quarantined": 1,
    "rubric.activated": 1,
    "rubric.configured": 1,
    "score.computed": 2,
    "backfill.started": 1,
    "backfill.completed": 1,
    "trial.completed": 2,
    "run.summarized": 1,
    "source.reset": 1,
    "transcript.turns": 2,
    "annotation.recorded": 1,
    "regression.detected": 1,
    "improvement.detected": 1,
}

# (type, version) -> function turning a payload of that version into version+1.
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    # v2 keeps the trajectory's wall time, total tokens and the graders (vally's report.md
    # figures); a v1 trial did not record them
    ("trial.completed", 1): lambda p: {**p, "trial": {**p["trial"], "wall_time_ms": None, "total_tokens": None,
                                                      "graders": []}},
    # v2: a Claude turn's fact may end with the model that answered and its 1-hour cache
    # writes (two more elements, for money); a v1 fact is a v2 fact without them
    ("transcript.turns", 1): lambda p: p,
    # v2 names the iteration's transcript window ([start or null, end] in UTC ns; null:
    # none), so its tokens can be priced at query time; a v1 score did not keep it
    ("score.computed", 1): lambda p: {**p, "window": None},
}


def canonical_json(payload: Any) -> str:
    """Compact JSON. Payload dicts are built in a fixed key order (dataclass field
    order), so equal payloads serialise to equal text without sorting."""
    return _CANONICAL.encode(payload)


# what json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# does, without building an encoder each call (one an event, and more for each score)
_CANONICAL = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class Event:
    type: str
    stream: str
    source: str
    idempotency_key: str
    payload: dict[str, Any]
    content_hash: str = ""
    source_path: str | None = None
    source_position: str | None = None
    occurred_at: str | None = None
    schema_version: int = 0
    seq: int | None = None
    recorded_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __reduce__(self):
        """Compact pickling (events cross from parsing workers in bulk): positional
        fields, no per-object attribute dict."""
        return (_rebuild, (self.type, self.stream, self.source, self.idempotency_key, self.payload,
                           self.content_hash, self.source_path, self.source_position, self.occurred_at,
                           self.schema_version, self.seq, self.recorded_at, self.extra))

    def __post_init__(self) -> None:
        if not self.schema_version:
            self.schema_version = CURRENT[self.type]
        if not self.content_hash:
            if "json" not in self.extra:  # a hot path may hand in the payload's JSON text
                self.extra["json"] = canonical_json(self.payload)
            self.content_hash = content_hash(self.extra["json"].encode("utf-8"))


def _rebuild(*fields: Any) -> Event:
    return Event(*fields)


_DIGEST = re.compile("[0-9a-f]{32}")


def idempotency_digest(identity: str) -> str:
    """The stored key: 128 bits of sha256 of the event's identity string (which
    names source, file, content or position; see each source). Fixed-length keys
    keep the unique index small (~15% faster appends than the readable strings)."""
    if len(identity) == 32 and _DIGEST.fullmatch(identity):
        return identity
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]


_INSERT = ("INSERT INTO events (stream, type, schema_version, idempotency_key, content_hash,"
           " occurred_at, recorded_at, source, source_path, source_position, payload)"
           " VALUES (?,?,?,?,?,?,?,?,?,?,?)")


def row(ev: Event) -> tuple:
    """``ev`` as an events row (``_INSERT``'s columns), its key digested. Parsing workers
    hand bulk events to the writer in this form: a tuple of strings pickles in a
    fraction of the time an ``Event`` with its payload dict takes."""
    return (ev.stream, ev.type, ev.schema_version, idempotency_digest(ev.idempotency_key), ev.content_hash,
            ev.occurred_at, ev.recorded_at, ev.source, ev.source_path, ev.source_position,
            ev.extra.get("json") or canonical_json(ev.payload))


def append(conn: sqlite3.Connection, event: Event) -> bool:
    """Insert unless the idempotency key exists; True when the event is new.

    Must run inside ``write_transaction``: the caller applies projections and
    moves checkpoints in the same transaction."""
    assert conn.in_transaction, "append() outside a write transaction"
    event.recorded_at = event.recorded_at or now_iso()
    r = row(event)
    event.idempotency_key = r[3]
    cur = conn.execute(_INSERT + " ON CONFLICT (idempotency_key) DO NOTHING", r)
    if cur.rowcount != 1:
        return False
    event.seq = cur.lastrowid
    return True


def append_rows(conn: sqlite3.Connection, rows: list[tuple]) -> list[tuple[int, int]]:
    """Append events given as ``row`` tuples, in order: ``(index, seq)`` of each new one.

    One lookup for the keys already stored and one ``executemany`` instead of a
    statement per event (bulk tailing spends most of its SQL time here). A key
    repeated inside the batch keeps its first row, as one-by-one appends would.
    A row without ``recorded_at`` gets now. The write lock is held, so the new rows
    get consecutive ``seq`` values ending at ``last_insert_rowid()``; a plain INSERT
    (no ``ON CONFLICT``) makes any surprise an error instead of a wrong ``seq``."""
    assert conn.in_transaction, "append_rows() outside a write transaction"
    fresh: dict[str, int] = {}
    for i, r in enumerate(rows):
        fresh.setdefault(r[3], i)
    stored = {r[0] for r in conn.execute(
        "SELECT idempotency_key FROM events WHERE idempotency_key IN (SELECT value FROM json_each(?))",
        (json.dumps(list(fresh)),))}
    new = [i for key, i in fresh.items() if key not in stored]
    if not new:
        return []
    now = now_iso()
    conn.executemany(_INSERT, [rows[i] if rows[i][6] else rows[i][:6] + (now,) + rows[i][7:] for i in new])
    first = conn.execute("SELECT last_insert_rowid()").fetchone()[0] - len(new) + 1
    return [(i, first + k) for k, i in enumerate(new)]


def append_many(conn: sqlite3.Connection, events: list[Event]) -> list[Event]:
    """``append`` for a batch (``append_rows``): the events that were new, with their
    ``seq``, stored key and ``recorded_at``."""
    assert conn.in_transaction, "append_many() outside a write transaction"
    if len(events) < 2:
        return [ev for ev in events if append(conn, ev)]
    now = now_iso()
    batch = []
    for ev in events:
        ev.recorded_at = ev.recorded_at or now
        batch.append(row(ev))
        ev.idempotency_key = batch[-1][3]
    new = []
    for i, seq in append_rows(conn, batch):
        events[i].seq = seq
        new.append(events[i])
    return new


def upcast(type_: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    target = CURRENT.get(type_, version)
    while version < target:
        step = UPCASTERS.get((type_, version))
        if step is None:
            raise ValueError(f"no upcaster for {type_} v{version}")
        payload = step(payload)
        version += 1
    return payload


def _row_to_event(row: sqlite3.Row) -> Event:
    payload = upcast(row["type"], row["schema_version"], json.loads(row["payload"]))
    return Event(
        type=row["type"], stream=row["stream"], source=row["source"],
        idempotency_key=row["idempotency_key"], payload=payload,
        content_hash=row["content_hash"], source_path=row["source_path"],
        source_position=row["source_position"], occurred_at=row["occurred_at"],
        schema_version=CURRENT.get(row["type"], row["schema_version"]),
        seq=row["seq"], recorded_at=row["recorded_at"],
    )


def rows(conn: sqlite3.Connection, *, after: int = 0, types: tuple[str, ...] = (),
         batch: int = 2000) -> Iterator[sqlite3.Row]:
    """Stored event rows with ``seq > after`` in order (optionally of some types),
    read in pages so memory stays flat however long the log is."""
    last = after
    where = " AND type IN (%s)" % ",".join("?" * len(types)) if types else ""
    while True:
        page = conn.execute(f"SELECT * FROM events WHERE seq > ?{where} ORDER BY seq LIMIT ?",
                            (last, *types, batch)).fetchall()
        if not page:
            return
        yield from page
        last = page[-1]["seq"]


def read(conn: sqlite3.Connection, *, after: int = 0, types: tuple[str, ...] = (),
         batch: int = 2000) -> Iterator[Event]:
    """Events in ``seq`` order, upcast to their current payload versions."""
    for row in rows(conn, after=after, types=types, batch=batch):
        yield _row_to_event(row)
