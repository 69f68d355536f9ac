"""Shipping: this ledger's events to a team ledger, exactly once in effect.

Transport is at least once, the apply is idempotent: a batch (events after the
cursor, in seq order) goes into the events table, where (ledger_id, seq) and
(origin, origin_seq) are unique keys, so that a batch the server holds
already, in whole or in part, adds nothing (see COLUMNS and _send), and the
projections are brought up to date from the events the server now holds in that
seq range, all in one server transaction. Only after
the server has confirmed that commit does the local cursor move (in the local
ledger, its own small transaction). A crash anywhere in between makes the next
pass send the same batch again, which changes nothing on the server: exactly once
in effect, which the tests check by killing the shipper at random moments.

Projections follow the events by seq (``projection.py``: a server function that
each row remembers the seq of the event it reflects and is replaced only by a
later one), so re-applying a batch, or a batch arriving after a later one, leaves
them as they were. The server decides what a shipper may write: the events
table's trigger and the functions it calls refuse a ledger id that is not the
connected machine role's (central migration 4).
"""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from ..config import ShipDestination
from ..redact import scrub
from ..views.export import SURROGATE_ESCAPE
from . import schema
from .connect import CentralError, connect, describe
from .projection import project

# The payload comes as bytes: it goes to the server as they are (see COPY_TYPES). An
# imported event keeps the ledger that recorded it first as its origin, and its seq
# there (event_origins): a batch reads those of its range apart (nearly always none)
# rather than joining every row.
LOCAL_BATCH = ("SELECT seq, stream, type, schema_version, idempotency_key, content_hash, occurred_at, recorded_at,"
               " source, source_path, source_position, CAST(payload AS BLOB) FROM events"
               " WHERE seq > ? ORDER BY seq LIMIT ?")
ORIGINS = "SELECT seq, origin, origin_seq FROM event_origins WHERE seq > ? AND seq <= ?"
# JSONB refuses a NUL character in a string, and a lone surrogate, high or low: such a
# payload keeps its exact text in payload_text, and its JSONB has U+FFFD in their places,
# so that the projections and views still read it. Every surrogate escape is looked at:
# a pair's is a false alarm, which only stores the text twice.
_UNFIT_FOR_JSONB = re.compile(rb"\\u0000|" + SURROGATE_ESCAPE.encode())
# A batch is copied straight into the events table (binary COPY: psycopg's C code
# writes the rows, no escaping pass over the payloads). A batch the server already
# holds in part (sent before a crash, or events imported from a ledger that shipped
# them itself) makes that COPY fail on a unique key; that transaction is rolled back
# and the batch goes the slow way: COPY into a staging table, then one INSERT ... ON
# CONFLICT DO NOTHING. The fast way saves a third of the server's work per event.
COLUMNS = ("ledger_id, seq, origin, origin_seq, idempotency_key, stream, type, schema_version, content_hash,"
           " occurred_at, recorded_at, source, source_path, source_position, payload, payload_text")
# jsonb travels in binary COPY as a version byte (1) and the JSON text, a uuid as its 16
# bytes: both declared as bytea here, so that psycopg sends the bytes as they are (its C
# dumper, see raw_bytes) and the server reads them once, as the column's type
COPY_TYPES = ["bytea", "int8", "bytea", "int8", "text", "text", "text", "int4", "text", "text", "timestamptz", "text",
              "text", "text", "bytea", "text"]
STAGING = ("CREATE TEMP TABLE IF NOT EXISTS ship_staging (LIKE agentledger.events INCLUDING DEFAULTS)"
           " ON COMMIT DELETE ROWS")
INSERT = (f"INSERT INTO agentledger.events ({COLUMNS}) SELECT {COLUMNS} FROM ship_staging ORDER BY seq"
          " ON CONFLICT DO NOTHING")
_JSONB_V1 = b"\x01"
# A batch the server holds in part must hold the same events at those seqs. Other events
# there mean that two ledgers have one id (a ledger file copied with a machine image) or
# that this ledger was restored from an older copy and has given those seqs to new
# events: ON CONFLICT would drop these events without a word, so the pass stops instead.
CLASH = ("SELECT count(*), min(s.seq), max(s.seq) FROM ship_staging s JOIN agentledger.events e"
         " ON e.ledger_id = s.ledger_id AND e.seq = s.seq WHERE e.idempotency_key <> s.idempotency_key")

@dataclass
class ShipReport:
    destination: str
    sent: int = 0  # events sent (a batch sent again counts again)
    new: int = 0  # events the server did not hold yet
    batches: int = 0
    cursor: int = 0  # the last seq the server confirmed
    behind: int = 0  # events still to send after this pass


def raw_bytes(pg) -> None:
    """Make ``pg`` dump bytes for a bytea column with psycopg's C dumper, not the Python
    one it picks for that type by default (DB-API ``Binary``'s): a row of ``COPY_TYPES``
    is formatted in half the time (1.0 µs against 1.9)."""
    import psycopg
    from psycopg.adapt import PyFormat

    pg.adapters.register_dumper(bytes, psycopg.adapters.get_dumper(bytes, PyFormat.BINARY))


def ledger_identity(local: sqlite3.Connection) -> str:
    return local.execute("SELECT ledger_id FROM ledger_identity").fetchone()[0]


def cursor_of(local: sqlite3.Connection, dest: ShipDestination) -> int:
    """The last seq ``dest`` confirmed. A cursor written under the older key (the URL
    with ``***`` for a password) still counts, so that an upgrade re-sends nothing."""
    for key in dict.fromkeys((dest.label, dest.legacy_label)):
        row = local.execute("SELECT last_seq FROM ship_cursors WHERE destination = ?", (key,)).fetchone()
        if row:
            return row[0]
    return 0


class Shipper:
    """Ships one local ledger to one destination over up to ``dest.connections``
    server connections, opened as a pass's backlog needs them and kept between
    passes until ``close`` (the daemon closes them after ``dest.idle_seconds``
    with nothing to send, so that a team's idle machines hold no server connection).

    Batches are read in seq order here and sent on the connections at once, so the
    server inserts several batches in parallel. Each transaction then
    locks its ledger's row (FOR UPDATE, which no reader may take) for its projections: those
    steps run one batch at a time, in whatever order the batches got there, which
    the seq rules make come out the same; the quarantine step looks at every later
    event on the server, so a record and the event that resolves it can arrive in
    either order. The cursor moves over batches confirmed without a gap."""

    def __init__(self, local: sqlite3.Connection, dest: ShipDestination, *, name: str = "") -> None:
        self.local = local
        self.dest = dest
        self.ledger_id = ledger_identity(local)
        self.ledger_uuid = uuid.UUID(self.ledger_id)  # as COPY sends it
        self.host = socket.gethostname()
        self.name = name or self.host
        self.pgs: list = []
        self.progress_at = time.monotonic()  # when a batch was last confirmed (see _watch_stall)
        self.stalled = False

    def close(self) -> None:
        pgs, self.pgs = self.pgs, []
        for pg in pgs:
            try:
                pg.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def _servers(self, want: int) -> list:
        """At least ``want`` open connections (up to ``dest.connections``), made when
        needed; the first one brings the schema up to date and registers the ledger.
        A pass with one batch to send (the daemon's usual one) holds one connection."""
        if any(pg.closed or pg.broken for pg in self.pgs):
            self.close()
        try:
            while len(self.pgs) < min(want, self.dest.connections):
                pg = connect(self.dest.url)
                raw_bytes(pg)
                self.pgs.append(pg)
                if len(self.pgs) == 1:
                    schema.migrate(pg)
                    pg.execute("SELECT agentledger.register(%s, %s, %s)", (self.ledger_id, self.name, self.host))
                pg.commit()
        except BaseException:
            self.close()
            raise
        return self.pgs

    def ship(self, *, max_batches: int | None = None) -> ShipReport:
        """Send every event after the cursor (or ``max_batches`` batches of them).
        Raises CentralError when the server cannot be reached or refuses; what was
        confirmed before stays confirmed."""
        import psycopg

        if (lid := ledger_identity(self.local)) != self.ledger_id:  # `central new-id` ran meanwhile
            self.ledger_id, self.ledger_uuid = lid, uuid.UUID(lid)
            self.close()  # the next connection registers the ledger under its new id
        if self.dest.legacy_label != self.dest.label:  # a cursor of an older release: to the password-free key
            with self.local:
                self.local.execute("UPDATE OR IGNORE ship_cursors SET destination = ? WHERE destination = ?",
                                   (self.dest.label, self.dest.legacy_label))
                self.local.execute("DELETE FROM ship_cursors WHERE destination = ?", (self.dest.legacy_label,))
        report = ShipReport(self.dest.label, cursor=cursor_of(self.local, self.dest))
        self.progress_at, self.stalled = time.monotonic(), False
        done = threading.Event()
        watch = threading.Thread(target=self._watch_stall, args=(done,), name="agentledger-ship-stall", daemon=True)
        watch.start()
        try:
            free: queue.Queue = queue.Queue()
            top = self.local.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
            batches = -(-(top - report.cursor) // self.dest.batch)  # at most: seqs may have gaps
            # even with nothing to send, one connection: a wrong URL or password is said now
            for pg in self._servers(max(1, min(batches, max_batches or batches))):
                free.put(pg)
            self._pass(report, free, max_batches)
        except psycopg.Error as exc:
            self.close()
            reason = (f"no progress for {self.dest.stall_seconds} s (a silent server or route)" if self.stalled
                      else scrub(describe(exc), self.dest.url))
            raise CentralError(f"{self.dest.label}: {reason}") from None
        finally:
            done.set()
            watch.join()
        report.behind = self.local.execute("SELECT count(*) FROM events WHERE seq > ?", (report.cursor,)).fetchone()[0]
        return report

    def _watch_stall(self, done: threading.Event) -> None:
        """A server or route that goes silent mid-transaction (accepts, then never
        answers) would hold a pass forever: once no batch has been confirmed for
        ``stall_seconds``, shut the connections' sockets down, so that the blocked
        call fails, the pass ends with an error, and the caller retries later."""
        while not done.wait(1.0):
            if time.monotonic() - self.progress_at > self.dest.stall_seconds:
                self.stalled = True
                for pg in list(self.pgs):
                    try:
                        socket.socket(fileno=os.dup(pg.fileno())).shutdown(socket.SHUT_RDWR)
                    except Exception:  # noqa: BLE001 - a connection already closed or broken
                        pass
                return

    def _pass(self, report: ShipReport, free: queue.Queue, max_batches: int | None) -> None:
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        def send(rows: list[tuple], origins: dict[int, tuple], after: int) -> int:
            pg = free.get()
            try:
                return self._send(pg, rows, origins, after)
            finally:
                free.put(pg)

        inflight: dict = {}  # future -> (after, last seq, events)
        done: dict[int, tuple[int, int, int]] = {}  # after -> (last seq, new, events)
        after, dispatched, failure = report.cursor, 0, None
        with ThreadPoolExecutor(self.dest.connections, thread_name_prefix="agentledger-ship") as pool:
            while True:
                while (failure is None and len(inflight) < self.dest.connections
                       and (max_batches is None or dispatched < max_batches)):
                    rows = self.local.execute(LOCAL_BATCH, (after, self.dest.batch)).fetchall()
                    if not rows:
                        break
                    origins = {seq: (uuid.UUID(origin).bytes, origin_seq) for seq, origin, origin_seq
                               in self.local.execute(ORIGINS, (after, rows[-1][0]))}
                    inflight[pool.submit(send, rows, origins, after)] = (after, rows[-1][0], len(rows))
                    after, dispatched = rows[-1][0], dispatched + 1
                if not inflight:
                    break
                finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for f in finished:
                    lo, hi, count = inflight.pop(f)
                    try:
                        done[lo] = (hi, f.result(), count)
                    except Exception as exc:  # noqa: BLE001 - the first failure is raised once all are back
                        failure = failure or exc
                moved = False
                while report.cursor in done:  # the server has committed these: now the cursor may move
                    hi, new, count = done.pop(report.cursor)
                    report.cursor, report.new, report.sent = hi, report.new + new, report.sent + count
                    report.batches += 1
                    self.progress_at = time.monotonic()
                    moved = True
                if moved:
                    with self.local:
                        self.local.execute("INSERT OR REPLACE INTO ship_cursors (destination, last_seq, shipped_at)"
                                           " VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                                           (self.dest.label, report.cursor))
        if failure is not None:
            raise failure

    def _send(self, pg, rows: list[tuple], origins: dict[int, tuple], after: int) -> int:
        """One server transaction: the batch's events, then (one batch at a time per
        ledger) the projections and the ledger's progress. Returns how many events
        the server did not hold yet."""
        import psycopg

        lo, hi, types = after, rows[-1][0], {r[2] for r in rows}
        try:
            with pg.transaction(), pg.cursor() as cur:
                self._copy(cur, "agentledger.events", rows, origins)
                project(cur, self.ledger_id, lo, hi, types)
            return len(rows)
        except psycopg.errors.UniqueViolation:
            pass  # some of it is there already: the slow way below
        with pg.transaction(), pg.cursor() as cur:
            cur.execute(STAGING)  # made by the first batch that needs it on this connection
            self._copy(cur, "ship_staging", rows, origins)
            cur.execute(INSERT)
            new = cur.rowcount
            if new < len(rows):
                clashes, first, last = cur.execute(CLASH).fetchone()
                if clashes:
                    raise CentralError(
                        f"{self.dest.label}: the server holds other events under this ledger's id ({self.ledger_id})"
                        f" at {clashes} of the seqs {first}-{last}: another ledger has the same id (a copied ledger"
                        " file?) or this one was restored from an older copy; nothing was shipped (docs/team.md:"
                        " \"Two ledgers, one id\")")
            project(cur, self.ledger_id, lo, hi, types)
        return new

    def _copy(self, cur, table: str, rows: list[tuple], origins: dict[int, tuple]) -> None:
        """``origins``: the events this ledger imported, by seq: the ledger that recorded
        them and their seq there (None when the import did not know it)."""
        own, unfit, instant = (self.ledger_uuid.bytes, None), _UNFIT_FOR_JSONB.search, _instant
        last, at = None, None  # a transaction's events share their recorded_at: parsed once
        with cur.copy(f"COPY {table} ({COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(COPY_TYPES)
            for seq, stream, type_, version, key, hash_, occurred, recorded, source, path, position, payload in rows:
                exact = None if unfit(payload) is None else payload.decode()
                if recorded != last:
                    try:
                        at, last = instant(recorded), recorded
                    except ValueError:  # only an imported ledger could hold one
                        raise CentralError(f"{self.dest.label}: event {seq} has recorded_at {recorded!r},"
                                           " which is not an ISO 8601 time") from None
                origin, origin_seq = origins.get(seq, own) if origins else own
                copy.write_row((own[0], seq, origin, origin_seq, key, stream, type_, version, hash_, occurred, at,
                                source, path, position,
                                _JSONB_V1 + (payload if exact is None else _fit_for_jsonb(exact)), exact))


def _fit_for_jsonb(text: str) -> bytes:
    """The payload with each NUL and lone surrogate in its strings replaced by U+FFFD."""
    def fit(value):
        if isinstance(value, str):
            return _UNFIT_CHARS.sub("\ufffd", value)
        if isinstance(value, dict):
            return {fit(k): fit(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fit(v) for v in value]
        return value

    return json.dumps(fit(json.loads(text)), ensure_ascii=False, separators=(",", ":")).encode()


_UNFIT_CHARS = re.compile("[\x00\ud800-\udfff]")  # json.loads has joined every valid surrogate pair


def _instant(text: str) -> datetime:
    """A ledger's recorded_at (ISO 8601, UTC, with its Z) as the aware datetime COPY sends."""
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def ship_all(local: sqlite3.Connection, destinations, *, name: str = "") -> list[ShipReport | CentralError]:
    """One pass to every destination; a failing one does not stop the others."""
    from .connect import available

    if not available():
        return [CentralError(f"{d.label}: the team ledger needs psycopg: pip install 'agentledger[central]'")
                for d in destinations]
    out: list[ShipReport | CentralError] = []
    for dest in destinations:
        shipper = Shipper(local, dest, name=name)
        try:
            out.append(shipper.ship())
        except CentralError as exc:
            out.append(exc)
        finally:
            shipper.close()
    return out
