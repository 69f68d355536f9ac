"""Marks of quiet iteration-log directories: what lets a full scan with nothing
changed cost a listing of the directory.

A full scan that finds a log directory in line with the ledger (no log file whose stat
moved, nothing committed by anyone while it ran, nothing scored, every sidecar right
and no error) keeps the mark of the listing it began with (``sources/iterlogs/
listing.py``) and a stamp of what it was in line with: the ledger's last event, its
schema, this code's version, the source's configuration, the read limits, the sidecar
settings and the rubric this process scores under. The next full scan whose listing
has that mark under that stamp reads no log file's checkpoint and, if nothing is
committed before its scoring pass, runs no backstop query (every iteration without a
score) and compares no sidecar with the ledger: each would find what the last one found.
Anything else (the artifacts in the repository, the transcripts, the trunk) is looked at
as in every scan.

A cache beside the ledger, not derived from events (``scan_marks``): a rebuild empties it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from .. import __version__
from ..config import IterationLogSource
from ..store import db as store
from .context import Context
from .outcome import Outcome


@dataclass
class _Pass:
    """One full scan's view of one source: the mark and stamp it began with, the last
    event then, whether they matched the kept ones, and whether a log file was read."""

    mark: str | None
    stamp: str
    seq: int
    quiet: bool
    observed: bool = False


class ScanMarks:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._passes: dict[str, _Pass] = {}

    def forget(self) -> None:
        """At the start of every full scan: nothing carries over from an earlier one."""
        self._passes.clear()

    def begin(self, src: IterationLogSource, mark: str | None) -> bool:
        """Whether this scan's listing of ``src`` (``mark``) shows it as the last quiet
        scan left it, under the same stamp: then its log files need no comparison."""
        seq = last_seq(self.ctx.conn)
        stamp = json.dumps([seq, self.ctx.conn.execute("PRAGMA user_version").fetchone()[0], __version__,
                            repr(src), repr(self.ctx.limits), repr(self.ctx.cfg.sidecars), self.ctx.rubric.version])
        kept = self.ctx.conn.execute("SELECT mark, stamp FROM scan_marks WHERE source = ?", (src.id,)).fetchone()
        quiet = mark is not None and kept is not None and tuple(kept) == (mark, stamp)
        self._passes[src.id] = _Pass(mark, stamp, seq, quiet)
        return quiet

    def observed(self, src: IterationLogSource) -> None:
        """A log file of ``src`` was read (or found moved) in this scan: not a quiet one."""
        if (p := self._passes.get(src.id)) is not None:
            p.observed = True

    def in_line(self, src: IterationLogSource) -> bool:
        """Whether ``src`` needs no backstop and its sidecars no comparison with the ledger:
        its listing matched, and no event has been committed since the scan began."""
        p = self._passes.get(src.id)
        return p is not None and p.quiet and last_seq(self.ctx.conn) == p.seq

    def finish(self, src: IterationLogSource, report: Outcome) -> None:
        """Keep this scan's mark of ``src`` if the scan was quiet there (``report``: what
        its ingest and its scoring and sidecar pass did)."""
        p = self._passes.pop(src.id, None)
        if p is None or p.quiet or p.mark is None or p.observed or not _quiet(report):
            return
        conn = self.ctx.conn
        with store.write_transaction(conn):  # holds the write lock: no commit between the check and the mark
            if last_seq(conn) == p.seq:
                conn.execute("INSERT OR REPLACE INTO scan_marks (source, mark, stamp) VALUES (?, ?, ?)",
                             (src.id, p.mark, p.stamp))


def last_seq(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]


def _quiet(report: Outcome) -> bool:
    return not (report.events or report.quarantined or report.scored or report.sidecars_written
                or report.sessions_written or report.errors or report.unwritten or report.still_unwritten)
