"""Projections: tables folded from events, in the same transaction as the append.

Each family of tables is an object with its own state, handlers and flush
(``iterations``, ``scores``, ``sessions``, ``trials``, ``transcripts``,
``trajectories``, ``quarantine``, ``detections``); ``Projector`` dispatches each event to the
handlers registered for its type, in a fixed order. ``Projector`` is private to
``store/``: events enter through ``store/log.py`` (``EventLog``) and ``rebuild``, and
those are the only code that writes projection tables, for live appends and for a
replay alike, so a replay of the log reproduces them exactly.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from .detections import DetectionFamily
from .events import Event
from .iterations import IterationFamily
from .quarantine import QuarantineFamily
from .scores import ScoreFamily, render_score_payload
from .sessions import SessionFamily, session_document, session_rows, session_summary
from .touched import Touched
from .trajectories import TrajectoryFamily
from .transcripts import TranscriptFamily
from .trials import PreparedTrials, TrialFamily, trial_row

__all__ = ["PROJECTION_TABLES", "PreparedTrials", "Touched", "rebuild", "render_score_payload",
           "session_document", "session_rows", "session_summary", "trial_row"]


class Projector:
    def __init__(self, conn: sqlite3.Connection, *, queue: bool = True):
        """``queue``: record what changed in ``pending`` for the next scoring pass
        (off for ``rebuild``, which reproduces scores rather than asking for them)."""
        self.conn = conn
        self.queue = queue
        self.touched = Touched()  # since the last flush
        self.queued = Touched()  # what every flush so far queued (the ledger's in-memory view)
        self.sessions = SessionFamily(conn)
        self.trials = TrialFamily(conn)
        # in dispatch and flush order; sessions last: they summarise what the others wrote
        self.quarantine = QuarantineFamily(conn)
        self.iterations = IterationFamily(conn, self.touched, self.sessions)
        self.scores = ScoreFamily(conn, self.sessions)
        self.families = (self.quarantine, self.iterations,
                         TranscriptFamily(conn, self.touched), self.scores, self.trials,
                         TrajectoryFamily(conn), DetectionFamily(conn), self.sessions)
        self.handlers: dict[str, list[Callable[[Event, dict[str, Any]], None]]] = {}
        for family in self.families:
            for type_, handler in family.handlers().items():
                self.handlers.setdefault(type_, []).append(handler)

    @property
    def session_bytes(self) -> dict[tuple[str, str, str], tuple[bytes, str]]:
        """(bytes, sha256) of each session sidecar this transaction rendered."""
        return self.sessions.session_bytes

    def apply(self, ev: Event) -> None:
        for handler in self.handlers.get(ev.type, ()):  # none: a type this version does not project
            handler(ev, ev.payload)

    def apply_many(self, events: list[Event]) -> None:
        """``apply`` each, in order. A run of ``iteration.recorded`` events of one source
        (a scan commits the records of a directory together) is projected by its two
        families in a few statements, a run of ``score.computed`` events in one; what
        they leave is what applying them one by one leaves (``rebuild`` does that:
        test_rebuild_reproduces_projections_and_sidecars)."""
        i = 0
        while i < len(events):
            ev = events[i]
            j = i + 1
            if ev.type == "iteration.recorded":
                files = {ev.payload["file"]}
                while (j < len(events) and events[j].type == "iteration.recorded" and events[j].source == ev.source
                       and events[j].payload["file"] not in files):
                    files.add(events[j].payload["file"])
                    j += 1
            elif ev.type == "score.computed":  # a scoring pass's batch: one statement
                while j < len(events) and events[j].type == "score.computed":
                    j += 1
            if j - i < 2:
                self.apply(ev)
            elif ev.type == "score.computed":
                self.scores.scores_computed(events[i:j])
            else:
                run = events[i:j]
                self.quarantine.resolve_many([(e.seq, e.source, e.payload["file"]) for e in run])
                self.iterations.iterations_recorded(ev.source, run)
            i = j

    def prefetch_trials(self, events: list[Event]) -> None:
        self.trials.prefetch(events)

    def flush(self) -> None:
        """Queue what changed for scoring, then each family's per-transaction work."""
        rows = self.touched.pending_rows()
        if rows and self.queue:
            self.conn.executemany("INSERT INTO pending (source, kind, key, lo, hi) VALUES (?,?,?,?,?)", rows)
        self.queued.merge(self.touched)  # a batch flushed part-way (import) still reports all it touched
        self.touched.clear()
        for family in self.families:
            family.flush()


PROJECTION_TABLES = tuple(t for family in (QuarantineFamily, IterationFamily, TranscriptFamily, ScoreFamily,
                                            TrialFamily, TrajectoryFamily, DetectionFamily,
                                            SessionFamily) for t in family.tables)


def rebuild(conn: sqlite3.Connection, progress=None) -> int:
    """Drop every projection row and replay the whole log; returns events replayed.
    ``progress(done, total)``, when given, hears every 1,000 events."""
    from .db import write_transaction
    from .events import read

    count = 0
    total = conn.execute("SELECT count(*) FROM events").fetchone()[0] if progress else 0
    with write_transaction(conn):
        for table in PROJECTION_TABLES:
            conn.execute(f"DELETE FROM {table}")
        conn.execute("DELETE FROM scan_marks")  # they vouch for projections as they were (ledger/scan_marks.py)
        projector = Projector(conn, queue=False)
        for ev in read(conn):
            projector.apply(ev)
            count += 1
            if progress and count % 1000 == 0:
                progress(count, total)
        projector.flush()
    if progress:
        progress(count, total)
    return count
