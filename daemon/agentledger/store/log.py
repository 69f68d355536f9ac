"""The one write path into the ledger: a batch of events is appended, projected and
committed together with what its source has read, in one transaction.

Every producer (ingest of whole files and tailed lines, scoring, rubric activation,
import) goes through ``EventLog``; none touches the transaction, the projector or the
checkpoint tables itself. The model is eventsourcing's recorders: the application
hands the recorder events and a tracking position, and the recorder owns the
atomicity. A crash leaves all of a batch or none of it, and idempotency keys drop
what a retried batch appends again.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .db import write_transaction
from .detections import DetectorCheckpoint
from .events import Event, append_many
from .projections import Projector
from .touched import Touched
from .trials import PreparedTrials


@dataclass(frozen=True)
class FileCheckpoint:
    """What a whole-file source last saw of ``path``: its stat and content hash
    (``content_hash`` None: the file is gone, and so is its checkpoint)."""

    source: str
    path: str
    kind: str
    stat: tuple | None
    content_hash: str | None

    def save(self, conn: sqlite3.Connection, last_seq: int | None) -> None:
        self.save_many(conn, [(self, last_seq)])

    @staticmethod
    def save_many(conn: sqlite3.Connection, checkpoints: list[tuple[FileCheckpoint, int | None]]) -> None:
        """Save each (checkpoint, last new seq of its file), in order."""
        gone = [(cp.source, cp.path) for cp, _ in checkpoints if cp.content_hash is None]
        if gone:
            conn.executemany("DELETE FROM source_checkpoints WHERE source = ? AND path = ?", gone)
        conn.executemany(
            "INSERT INTO source_checkpoints (source, path, kind, dev, ino, size, mtime_ns, content_hash, last_seq)"
            " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (source, path) DO UPDATE SET kind = excluded.kind,"
            " dev = excluded.dev, ino = excluded.ino, size = excluded.size, mtime_ns = excluded.mtime_ns,"
            " content_hash = excluded.content_hash, last_seq = coalesce(excluded.last_seq, last_seq)",
            [(cp.source, cp.path, cp.kind, *(cp.stat or (None, None, None, None)), cp.content_hash, seq)
             for cp, seq in checkpoints if cp.content_hash is not None])


@dataclass(frozen=True)
class TailCheckpoint:
    """Where the next read of a tailed file starts (``end``: a ``jsonl.Position``),
    with the file's stat."""

    source: str
    path: str
    mode: str
    stat: tuple | None
    end: Any

    def save(self, conn: sqlite3.Connection, last_seq: int | None) -> None:
        dev, ino, size, mtime = self.stat or (None, None, None, None)
        end = self.end
        conn.execute(
            "INSERT INTO source_checkpoints (source, path, kind, dev, ino, size, mtime_ns, byte_offset,"
            " line_no, fingerprint, open_line, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (source, path) DO UPDATE SET kind = excluded.kind, dev = excluded.dev,"
            " ino = excluded.ino, size = excluded.size, mtime_ns = excluded.mtime_ns,"
            " byte_offset = excluded.byte_offset, line_no = excluded.line_no, fingerprint = excluded.fingerprint,"
            " open_line = excluded.open_line, last_seq = coalesce(excluded.last_seq, last_seq)",
            (self.source, self.path, self.mode, dev, ino, size, mtime, end.offset, end.line_no,
             end.fingerprint, end.open, last_seq))


Checkpoint = FileCheckpoint | TailCheckpoint | DetectorCheckpoint


class Batch:
    """One open write transaction of the ``EventLog``. Once it has committed,
    ``touched`` says what its events changed (for the planner) and
    ``session_bytes`` holds the session sidecars it rendered."""

    def __init__(self, conn: sqlite3.Connection, projector: Projector) -> None:
        self.conn = conn
        self._projector = projector
        self.touched = Touched()
        self.session_bytes: dict[tuple[str, str, str], tuple[bytes, str]] = {}

    def append(self, events: list[Event], *, checkpoint: Checkpoint | None = None,
               imported: bool = False) -> list[Event]:
        """Append ``events`` (those whose idempotency key is new), project them, and
        save ``checkpoint`` with the last new event's ``seq``; the new events.

        ``imported``: they came from another ledger's export: their origins are kept
        (``event_origins``), and their scores are marked as not computed here
        (``imported_scores``: no sidecar is written from one before this ledger has
        scored that iteration itself)."""
        if len(events) > 1:
            self._projector.prefetch_trials(events)
        new = append_many(self.conn, events)
        if imported and new:
            self._imported(new)
        self._projector.apply_many(new)
        if checkpoint is not None:
            checkpoint.save(self.conn, new[-1].seq if new else None)
        return new

    def append_files(self, files: list[tuple[list[Event], FileCheckpoint]]) -> list[list[Event]]:
        """``append`` for whole files, (events, checkpoint) each: one ``append_many`` for
        all their events and one statement for all their checkpoints, each saved with
        the last new event of its own file; the new events of each file. A cold ingest
        of 10,000 files made four statements a file here."""
        events = [ev for evs, _ in files for ev in evs]
        if len(events) > 1:
            self._projector.prefetch_trials(events)
        new = append_many(self.conn, events)
        self._projector.apply_many(new)
        fresh = {id(ev) for ev in new}
        out = [[ev for ev in evs if id(ev) in fresh] for evs, _ in files]
        FileCheckpoint.save_many(self.conn, [(cp, mine[-1].seq if mine else None)
                                             for (_, cp), mine in zip(files, out)])
        return out

    def append_prepared(self, prepared: PreparedTrials, *, checkpoint: Checkpoint | None = None) -> int:
        """``append`` for trials a parsing worker prepared; how many were new."""
        n, last = prepared.record(self.conn, self._projector.trials)
        if checkpoint is not None:
            checkpoint.save(self.conn, last)
        return n

    def flush(self) -> None:
        """Bring the projections' per-transaction aggregates up to date now (a long
        import does this between its chunks; the commit always does)."""
        self._projector.flush()

    def _imported(self, new: list[Event]) -> None:
        own = self.conn.execute("SELECT ledger_id FROM ledger_identity").fetchone()[0]
        self.conn.executemany("INSERT INTO event_origins (seq, origin, origin_seq) VALUES (?, ?, ?)",
                              [(ev.seq, ev.extra["origin"], ev.extra["origin_seq"]) for ev in new
                               if ev.extra.get("origin") not in (None, own)])
        self.conn.executemany("INSERT OR IGNORE INTO imported_scores (seq) VALUES (?)",
                              [(ev.seq,) for ev in new if ev.type == "score.computed"])

    def _close(self) -> None:
        self._projector.flush()
        self.touched = self._projector.queued
        self.session_bytes = self._projector.session_bytes


class EventLog:
    """The ledger's events, written only through ``batch`` (or ``commit`` for one
    append)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @contextlib.contextmanager
    def batch(self) -> Iterator[Batch]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``: everything appended in the block, its
        projections and its checkpoints commit together, or (on an exception) none."""
        with write_transaction(self.conn):
            batch = Batch(self.conn, Projector(self.conn))
            yield batch
            batch._close()

    def commit(self, events: list[Event], *, checkpoint: Checkpoint | None = None) -> list[Event]:
        """One ``append`` in a transaction of its own; the new events."""
        with self.batch() as batch:
            return batch.append(events, checkpoint=checkpoint)
