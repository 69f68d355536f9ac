"""Sidecars on disk follow the ledger: rendered from its score events and session
rows, written only where the bytes on disk differ, on a writer thread in the
daemon. Also removes the temp files that killed writers left.

Every process that scores one ledger (the daemon, the close-task hook, a backfill)
writes its sidecars under one lock (``flock`` on ``<ledger>.sidecars.lock``), and
under it writes only the active rubric's (read from the ledger there and then). An
activation commits before its backfill's writes take the lock, so once the last
activation's backfill has written, no sidecar of an earlier rubric can land:
whatever the interleaving, the sidecars end up the active rubric's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import sqlite3
from collections.abc import Collection, Iterator
from pathlib import Path

from ..config import IterationLogSource
from ..output import sidecars
from ..output.spare import Spares
from ..process import parallel
from ..sources import confine
from ..store import db as store
from ..store.projections import session_document, session_rows
from ..store.scores import STORED_SQL, render_stored, stored_job
from . import sidecar_writes
from .context import Context
from .outcome import Outcome

log = logging.getLogger("agentledger")
AUTO_FSYNC_MAX = 20  # writes of up to this many sidecars are fsynced under fsync = "auto"
RENDER_RUN = 256  # score sidecars a worker renders and writes at a time in a large sync
SESSION_ROWS_FROM = 20  # stale session sidecars from which a sync reads every session's rows in one query


class SidecarSync:
    def __init__(self, ctx: Context, *, background: bool = False) -> None:
        """``background`` (the daemon): a scoring pass of more than ``AUTO_FSYNC_MAX``
        sidecars hands them to a writer thread and returns after its commit, so the
        next change is read while they land; their counts and errors come with
        ``collect_writes``."""
        self.ctx = ctx
        self._check_conn: sqlite3.Connection | None = None  # the writer thread's view of the ledger
        self.writer = sidecars.BackgroundWriter(self.still_current, self.gate) if background else None
        self._swept: set[str] = set()  # directories cleared of killed writers' temp files
        self._problem_paths: set[str] | None = None  # sidecar_problems, read once

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            for path, err in self.writer.take()[1]:  # no report left to carry them
                log.error("cannot write %s: %s", path, err)
        if self._check_conn is not None:  # also opened by a pass's own writer (scoring_pass)
            self._check_conn.close()
            self._check_conn = None

    def fsync(self, count: int) -> bool:
        """Whether sidecar writes are fsynced: see ``[sidecars] fsync`` in config.example.toml."""
        mode = self.ctx.cfg.sidecars.fsync
        return mode == "always" or (mode == "auto" and count <= AUTO_FSYNC_MAX)

    def gate(self) -> contextlib.AbstractContextManager:
        """The ledger's sidecar lock (see the module docstring); held briefly: one
        write, one run of writes, or one comparison of a source's sidecars with the ledger."""
        return sidecar_writes.gate(self.ctx.cfg.store.path)

    def bulk_writer(self, total: int) -> sidecars.BackgroundWriter | sidecar_writes.PoolWriter:
        """The writer of a scoring pass of ``total`` scores outside the daemon: the worker
        pool's processes when the pass uses them, else a thread (``sidecar_writes``)."""
        pool = parallel.pool_for(total)
        if pool is None:
            return sidecars.BackgroundWriter(self.still_current, self.gate)
        return sidecar_writes.PoolWriter(pool, self.ctx.cfg.store.path, self.ctx.rubric.version)

    def active(self, conn: sqlite3.Connection | None = None) -> str:
        """The ledger's active rubric now (this process's if the ledger names none)."""
        return store.read_state(conn or self.ctx.conn, "active_rubric") or self.ctx.rubric.version

    def sync(self, src: IterationLogSource, iterations: list[int] | None = None, *,
             skip_iterations: Collection[int] = (), skip_sessions: Collection[str] = ()) -> Outcome:
        """Write every sidecar (of ``iterations``, or all) whose bytes on disk are not
        those of the ledger's active rubric."""
        report = Outcome()
        if why := self.ctx.roots.refused(src, missing="sidecars not written"):
            report.errors.append(why)
            return report
        if iterations is None:  # a full pass; the close-task hook does not list the directory
            self.sweep(src)
        if iterations is None and self.writer is not None:
            self.writer.wait()  # compare the disk with the ledger once queued writes have landed
        with self.gate():
            return self._sync(src, iterations, skip_iterations, skip_sessions, report)

    def _sync(self, src: IterationLogSource, iterations: list[int] | None, skip_iterations: Collection[int],
              skip_sessions: Collection[str], report: Outcome) -> Outcome:
        conn, version = self.ctx.conn, self.active()
        filt, args = "", [src.id, version]
        if iterations is not None:
            if not iterations:
                return report
            # one parameter, whatever the count (a placeholder each stopped at SQLite's limit
            # on variables: a cold ingest of more than 250,000 iterations on Debian's build)
            its = json.dumps(list(iterations))
            filt = " AND iteration IN (SELECT value FROM json_each(?))"
            args.append(its)
        # never from a score imported and not scored here (scoring_pass); with what ``sidecar_seen`` recorded
        # of each file, and on a full sync each sidecar's stat in this pass's listing (one moved since is read)
        listing = self.ctx.listed_sidecars.pop(src.id, None) if iterations is None else None
        seen = Seen(conn, src.path, listing and listing.sidecars)
        cur = conn.cursor()
        cur.row_factory = None  # plain tuples: every score of the source on a full sync
        rows = cur.execute(
            "SELECT s.iteration, s.sidecar, s.sidecar_sha256, s.seq, " + Seen.RECORDED + " FROM scores s"
            " LEFT JOIN sidecar_seen k ON k.path = ? || s.sidecar WHERE s.source = ? AND s.rubric_version = ?"
            " AND s.seq NOT IN (SELECT seq FROM imported_scores)" + filt, [seen.prefix, *args])
        stale = []
        problems = self._problems()
        for iteration, name, sha, seq, *recorded in rows:
            if iteration in skip_iterations:  # just written (or tried) by the caller
                continue
            if not seen.holds(name, sha, recorded):
                stale.append((name, seq, iteration))
            elif (path := seen.path(name)) in problems:  # fixed by hand meanwhile
                self._solved(path)
        sql = ("SELECT session_id, sidecar, sidecar_sha256, " + Seen.RECORDED + " FROM sessions s"
               " LEFT JOIN sidecar_seen k ON k.path = ? || s.sidecar WHERE source = ? AND rubric_version = ?"
               " AND sidecar IS NOT NULL")
        sargs: list = [seen.prefix, src.id, version]
        if conn.execute("SELECT 1 FROM imported_scores LIMIT 1").fetchone():  # (a scan of the scores: only then)
            sql += (" AND session_id NOT IN (SELECT i.session_id FROM imported_scores u JOIN scores s ON s.seq = u.seq"
                    " JOIN iterations i ON i.source = s.source AND i.iteration = s.iteration"
                    " WHERE s.source = ? AND s.rubric_version = ?)")
            sargs += [src.id, version]
        if iterations is not None:
            sql += (" AND session_id IN (SELECT session_id FROM iterations WHERE source = ?"
                    " AND iteration IN (SELECT value FROM json_each(?)))")
            sargs += [src.id, its]
        sessions = [r for r in conn.execute(sql, sargs).fetchall() if r["session_id"] not in skip_sessions
                    and not seen.holds(r["sidecar"], r["sidecar_sha256"], tuple(r)[3:])]
        seen.save()
        fresh: list[tuple] = []
        fsync = self.fsync(len(sessions))  # the session sidecars'
        kept = _kept_sessions(conn, src.id, version, sessions, seen)
        sessions = [r for r in sessions if r["session_id"] not in kept]  # recomputed before bytes were kept
        with Spares() as spares:
            def write_sessions() -> Iterator[None]:  # one a step, between the workers' results
                rows = session_rows(conn, src.id, version) if len(sessions) > SESSION_ROWS_FROM else None
                for r in sessions:
                    data = session_document(conn, src.id, r["session_id"], version,
                                            None if rows is None else rows.get(r["session_id"], []))
                    if data is not None:
                        report.sessions_written += self.write(seen.path(r["sidecar"]), data, report, fsync, fresh,
                                                              compare=False, spares=spares)  # known to differ
                    yield
            self._write_scores(seen.prefix, src.id, version, stale, report, (fsync, kept), write_sessions(),
                               len(sessions))
        remember(conn, fresh)
        return report

    def _write_scores(self, prefix: str, source: str, version: str, stale: list[tuple[str, int, int]],
                      report: Outcome, kept: tuple[bool, dict[str, tuple[str, bytes]]],
                      alongside: Iterator[None], steps: int) -> None:
        """Write the score sidecars ``stale`` names ((file name, its event's seq, iteration))
        under ``version``, then the session sidecars ``kept`` holds ((fsync, {session:
        (path, bytes)})), and take the ``steps`` steps of ``alongside`` (the session sidecars
        of no kept bytes). Score sidecars are the ledger's bytes (``score_sidecars``) or
        rendered from the events of scores projected before it kept them. When there are many
        (a switch back, a rebuild), the worker processes write them, ``RENDER_RUN`` a run
        (``render_run``: swapped into place, freeing no inode), while this process reads the
        next ones and takes its steps. It holds the gate for the whole sync; the workers take no lock."""
        fsync, fresh = self.fsync(len(stale)), []
        session_fsync, session_jobs = kept[0], list(kept[1].values())
        pool = parallel.pool_for(len(stale) + len(session_jobs))
        if pool is None:
            with Spares() as spares:
                for job in _stored(self.ctx.conn, prefix, stale, source, version):
                    path, data = render_stored(job)
                    report.sidecars_written += self.write(path, data, report, fsync, fresh, compare=False,
                                                          spares=spares)
                for path, data in session_jobs:
                    report.sessions_written += self.write(path, data, report, session_fsync, fresh, compare=False,
                                                          spares=spares)
        else:
            stored = _stored(self.ctx.conn, prefix, stale, source, version)
            runs = itertools.chain(
                ((fsync, "sidecars_written", run) for run in iter(lambda: list(itertools.islice(stored, RENDER_RUN)), [])),
                ((session_fsync, "sessions_written", session_jobs[at:at + RENDER_RUN])
                 for at in range(0, len(session_jobs), RENDER_RUN)))
            results = math.ceil(len(stale) / RENDER_RUN) + math.ceil(len(session_jobs) / RENDER_RUN)
            per_result = math.ceil(steps / results)  # steps taken after each result
            for kind, written, failed, seen in parallel.imap_bounded(sidecar_writes.render_run, runs):
                setattr(report, kind, getattr(report, kind) + written)
                fresh += seen
                for path, reason in failed:
                    self.failed(report, path, reason.removeprefix(f"{path}: "))
                for path in self._problems().intersection(p for p, *_ in seen):
                    self._solved(path)
                for _ in itertools.islice(alongside, per_result):
                    pass
        for _ in alongside:
            pass
        remember(self.ctx.conn, fresh)

    def write(self, path: Path | str, data: bytes, report: Outcome, fsync: bool, seen: list | None = None, *,
              compare: bool = True, spares: Spares | None = None) -> int:
        """One write; the caller holds the gate (``sync``) or uses ``write_scored``.
        A refusal (a symlink at the target, a read-only directory, a full disk) is
        noted in ``report.unwritten`` and holds nothing else up. ``seen``, ``compare``,
        ``spares``: as ``write_atomic``'s."""
        try:
            written = int(sidecars.write_atomic(path, data, durable=fsync, compare=compare, seen=seen,
                                                spares=spares))
        except OSError as exc:
            self.failed(report, str(path), str(exc).removeprefix(f"{path}: "))
            return 0
        if str(path) in self._problems():
            self._solved(str(path))
        return written

    # -- sidecars that could not be written: problem records --------------------------------------
    def _problems(self) -> set[str]:
        if self._problem_paths is None:
            self._problem_paths = {r[0] for r in self.ctx.conn.execute("SELECT path FROM sidecar_problems")}
        return self._problem_paths

    def _solved(self, path: str) -> None:
        self.ctx.conn.execute("DELETE FROM sidecar_problems WHERE path = ?", (path,))
        self._problems().discard(path)

    def failed(self, report: Outcome, path: str, reason: str) -> None:
        """A sidecar that could not be written: a problem record (``agentledger
        quarantine``, ``status``), in ``report.unwritten`` when it is new, only counted
        when it was known already (the daemon says each problem once, not every scan)."""
        if path in self._problems():
            report.still_unwritten.add(path)
        else:
            report.unwritten[path] = reason
            self._problems().add(path)
        self.ctx.conn.execute(
            "INSERT INTO sidecar_problems (path, reason, since) VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ'))"
            " ON CONFLICT (path) DO UPDATE SET reason = excluded.reason", (path, reason))

    def writes_outcome(self, written: dict[str, int], failed: list[tuple[str, str]], seen: list[tuple] = ()) -> Outcome:
        """A writer thread's counts and failures as a report (failures recorded as problems);
        what it wrote goes to ``sidecar_seen``, so the next sync does not read those files
        back to learn what they hold."""
        report = Outcome(sidecars_written=written["sidecars_written"], sessions_written=written["sessions_written"])
        for path, reason in failed:
            self.failed(report, path, reason.removeprefix(f"{path}: "))
        remember(self.ctx.conn, seen)
        return report

    def write_scored(self, path: Path | str, data: bytes, report: Outcome, fsync: bool, version: str) -> int:
        """A sidecar just scored under ``version``: written under the gate, and only
        while ``version`` is the active rubric (another process may have activated
        another since; its backfill writes those)."""
        with self.gate():
            if self.active() != version:
                return 0
            return self.write(path, data, report, fsync)

    def sweep(self, src: IterationLogSource) -> None:
        """Remove temp files that killed writers left beside the sidecars (once per
        run, and at each daemon reconcile: ``forget``): a SIGKILL between a temp
        file's creation and its rename leaves one behind in the user's directory."""
        listing = self.ctx.listed_temps.pop(src.id, None)  # this pass's listing, or none: never an older one
        if src.id in self._swept:
            return
        self._swept.add(src.id)
        removed = sidecars.remove_stale_temps(src.path, listing and listing.temps)
        if removed:
            log.info("removed %d temp file(s) left by killed writers in %s", removed, src.path)

    def forget(self) -> None:
        self._swept.clear()
        self.ctx.listed_temps.clear()
        self.ctx.listed_sidecars.clear()

    def collect_writes(self) -> Outcome:
        """Sidecar writes (and their errors) the writer thread finished since the last call."""
        return self.writes_outcome(*self.writer.take()) if self.writer is not None else Outcome()

    def still_current(self, keys: list[tuple]) -> set[tuple]:
        """Which queued sidecars' bytes (each key ends with their sha256) are still what
        the ledger holds under its active rubric (asked on the writer thread, through
        its own read-only connection, under the gate, once for a run of writes). The
        close-task hook scores and writes in another process while the daemon's writes
        wait in the queue; without this, an older queued write could land over its
        newer file, or another rubric's, until the next reconcile."""
        try:
            if self._check_conn is None:
                self._check_conn = store.connect_readonly(self.ctx.cfg.store.path)
        except (sqlite3.Error, store.StoreError):
            return set(keys)  # cannot tell: write, as without the check
        return sidecar_writes.current_keys(self._check_conn, keys, self.ctx.rubric.version)


class Seen:
    """The sidecars of one directory as last read and found right: their stat key and
    sha256 (``sidecar_seen``, a cache beside the ledger, not derived from events). A
    sidecar whose stat is unchanged since it was read and found right is not read again,
    so a full sync of 10,000 unchanged sidecars is 10,000 stats, not 10,000 reads."""

    # what a query that LEFT JOINs ``sidecar_seen k`` on a sidecar's path selects for
    # ``holds``: the stat recorded, and whether the bytes recorded are the ones wanted
    RECORDED = "k.dev, k.ino, k.size, k.mtime_ns, k.sha256 = sidecar_sha256"

    def __init__(self, conn: sqlite3.Connection, directory: Path,
                 listed: dict[str, tuple] | None = None) -> None:
        """``listed``: the stat key of each sidecar (by name) in a listing of the directory
        this pass made (``sources/iterlogs/listing.py``), taken instead of a stat of its own;
        a file changed since the listing is found by the pass's next listing."""
        self.conn = conn
        self.prefix = f"{directory}{os.sep}"
        self.listed = listed or {}
        self.fresh: list[tuple] = []

    def path(self, name: str) -> str:
        """The sidecar ``name`` of this directory (a string: 10,000 Path objects cost more
        than the stats)."""
        return self.prefix + name

    def holds(self, name: str, sha: str, recorded) -> bool:
        """Whether the sidecar ``name`` has the bytes whose sha256 is ``sha``; ``recorded``:
        the ``RECORDED`` columns of its row (NULLs: nothing recorded)."""
        path = self.prefix + name
        key = self.listed.get(name)
        if key is None:
            try:
                st = os.stat(path)
            except OSError:
                return False
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if recorded[0] is not None and tuple(recorded[:4]) == key:
            return bool(recorded[4])  # unchanged since it was read or written: no need to read it
        if disk_sha(path) != sha:
            return False
        self.fresh.append((path, *key, sha))
        return True

    def save(self) -> None:
        remember(self.conn, self.fresh)
        self.fresh = []


def _stored(conn: sqlite3.Connection, prefix: str, stale: list[tuple[str, int, int]], source: str,
            version: str) -> Iterator[tuple]:
    """``render_stored``'s jobs for the scores ``stale`` names ((file name, its event's seq,
    iteration)) under ``version``, 500 a query: (path, bytes) of those whose rendered bytes
    the ledger keeps (``score_sidecars``), what to render of each other's event."""
    for at in range(0, len(stale), 500):
        rendered = dict(conn.execute(
            "SELECT iteration, bytes FROM score_sidecars WHERE source = ? AND rubric_version = ? AND iteration IN"
            " (SELECT value FROM json_each(?))", (source, version, json.dumps([it for *_, it in stale[at:at + 500]]))))
        part = {}
        for name, seq, it in stale[at:at + 500]:
            data = rendered.get(it)
            if data is not None:
                yield prefix + name, data
            else:
                part[seq] = name
        if not part:
            continue
        for seq, kind, schema_version, *fields in conn.execute(
                f"SELECT seq, type, schema_version, {STORED_SQL} FROM events WHERE seq IN"
                " (SELECT value FROM json_each(?)) ORDER BY seq", (json.dumps(list(part)),)).fetchall():
            path = prefix + part[seq]
            yield stored_job(path, kind, schema_version, *fields) or (path, kind, schema_version, conn.execute(
                "SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()[0])


def _kept_sessions(conn: sqlite3.Connection, source: str, version: str, sessions: list, seen: Seen
                   ) -> dict[str, tuple[str, bytes]]:
    """(path, the bytes the ledger keeps: ``session_sidecars``) of each of ``sessions`` (rows
    with their ``session_id`` and ``sidecar``) under ``version`` that has them, by session."""
    if not sessions:
        return {}
    kept = dict(conn.execute(
        "SELECT session_id, bytes FROM session_sidecars WHERE source = ? AND rubric_version = ? AND session_id IN"
        " (SELECT value FROM json_each(?))", (source, version, json.dumps([r["session_id"] for r in sessions]))))
    return {r["session_id"]: (seen.path(r["sidecar"]), kept[r["session_id"]]) for r in sessions if r["session_id"] in kept}


def remember(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    """(path, dev, ino, size, mtime_ns, sha256) of sidecars known to hold those bytes."""
    if not rows:
        return
    sql = "INSERT OR REPLACE INTO sidecar_seen (path, dev, ino, size, mtime_ns, sha256) VALUES (?,?,?,?,?,?)"
    if conn.in_transaction:
        conn.executemany(sql, rows)
    else:
        with store.write_transaction(conn):
            conn.executemany(sql, rows)


SIDECAR_MAX = 64 << 20  # bytes: past any sidecar this writes (a session of 100,000 iterations: ~6 MB)


def disk_sha(path: Path | str) -> str | None:
    """The sha256 of the regular file at ``path``; None when there is none the ledger could
    have written: gone, a link (not followed: one to ``/dev/zero`` would be read without
    end), a FIFO or device (opened without waiting for a writer) or larger than any
    sidecar. The writer then refuses or replaces it. (Opened as every source file is:
    ``confine.open_checked``.)"""
    try:
        with confine.open_checked(path) as fh:
            data = fh.read(SIDECAR_MAX + 1)
    except OSError:
        return None
    return sidecars.sha256(data) if len(data) <= SIDECAR_MAX else None
