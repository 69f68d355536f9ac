"""Where sidecar writes happen and under what: the ledger's sidecar lock (``gate``), the
question of which queued writes are still the ledger's (``current_keys``), and a writer
that hands a bulk pass's writes to the worker processes (``PoolWriter``).

A scoring pass of a command (ingest, backfill, rebuild) writes thousands of sidecars.
Written by a thread of the committing process, each write's syscalls waited for the GIL
the main thread held while it gathered and committed (a backfill of 10,000: ~1.5 s of
its wall time). The worker processes are mostly idle while the main process commits, and
have no GIL to share with it: they take the writes, a run at a time, each run under the
lock and after the question, exactly as the writer thread does them (``BackgroundWriter``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from ..output import sidecars
from ..store import db as store
from ..store.scores import render_stored


@contextlib.contextmanager
def gate(store_path: Path | str) -> Iterator[None]:
    """The ledger's sidecar lock (``flock`` on ``<ledger>.sidecars.lock``; see
    ``sidecar_sync``), held for one write, one run of writes or one comparison."""
    try:
        fd = os.open(f"{store_path}.sidecars.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:  # no lock to be had (a read-only directory): write as before
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def current_keys(conn: sqlite3.Connection, keys: list[tuple], default_version: str) -> set[tuple]:
    """Which of ``keys`` ((table, source, iteration or session, rubric, sha256) of queued
    sidecar bytes) are still what the ledger holds under its active rubric
    (``default_version`` when the ledger names none). An error: all of them (cannot
    tell: write, as without the check)."""
    try:
        active = store.read_state(conn, "active_rubric") or default_version
        groups: dict[tuple, list[tuple]] = {}
        for key in keys:
            if key[3] == active:
                groups.setdefault(key[:2], []).append(key)
        out: set[tuple] = set()
        for (table, source), group in groups.items():
            column = "iteration" if table == "scores" else "session_id"
            held = dict(conn.execute(
                f"SELECT {column}, sidecar_sha256 FROM {table} WHERE source = ? AND rubric_version = ?"
                f" AND {column} IN (SELECT value FROM json_each(?))",
                (source, active, json.dumps([k[2] for k in group]))).fetchall())
            out.update(k for k in group if held.get(k[2]) == k[4])
    except sqlite3.Error:
        return set(keys)
    return out


_readers: dict[str, sqlite3.Connection] = {}  # in a worker: one read-only connection a ledger


def write_run(job: tuple) -> tuple[dict[str, int], int, list[tuple[str, str]], list[tuple]]:
    """In a worker process: one run of queued writes, (ledger path, default rubric,
    [(path, bytes, fsync, kind, key)]), under the lock and after one question; what
    ``BackgroundWriter.take`` reports: counts by kind, writes skipped as superseded,
    (path, error) of those that failed, and ``sidecar_seen`` rows of those that landed."""
    store_path, default_version, items = job
    with gate(store_path):
        keys = [it[4] for it in items if it[4] is not None]
        current = None
        if keys:
            try:
                conn = _readers.get(store_path) or _readers.setdefault(store_path, store.connect_readonly(store_path))
                current = current_keys(conn, keys, default_version)
            except (sqlite3.Error, store.StoreError):
                current = None
        return sidecars.write_many(items, current)


def render_run(job: tuple) -> tuple[str, int, list[tuple[str, str]], list[tuple]]:
    """In a worker process: one run of a large sync's stale sidecars, (fsync, their kind:
    "sidecars_written" or "sessions_written", [(path, the bytes the ledger keeps) or a
    score's ``store.scores.stored_job``]), rendered from their events where no bytes were
    kept, and written; the syncing process holds the gate. Their kind, how many were
    written, (path, error) of those that were not, and the ``sidecar_seen`` rows of those
    that were."""
    fsync, kind, jobs = job
    written, _, errors, seen = sidecars.write_many(
        ((path, data, fsync, kind, None) for path, data in map(render_stored, jobs)), compare=False)
    return kind, written[kind], errors, seen


class PoolWriter:
    """``BackgroundWriter``'s interface for a bulk pass of a command: writes are
    gathered into runs of ``RUN`` and each run goes to the worker pool (``write_run``);
    at most ``IN_FLIGHT`` runs wait there at once, so memory stays bounded. Runs may
    land in any order: each holds the lock and asks which of its writes are still the
    ledger's, so an older write of a file that a later run also writes is skipped
    whenever it would land after it."""

    RUN, IN_FLIGHT = 256, 8

    def __init__(self, pool, store_path: Path, default_version: str) -> None:
        self._pool = pool
        self._head = (str(store_path), default_version)
        self._items: list[tuple] = []
        self._futures: deque = deque()
        self._done: list[tuple] = []

    def submit(self, path: Path | str, data: bytes, durable: bool, kind: str = "sidecars_written",
               key: tuple | None = None) -> None:
        self._items.append((path, data, durable, kind, key))
        if len(self._items) >= self.RUN:
            self._send()

    def _send(self) -> None:
        if not self._items:
            return
        job = (*self._head, self._items)
        self._items = []
        while len(self._futures) >= self.IN_FLIGHT:
            self._collect(self._futures.popleft())
        try:
            self._futures.append((job, self._pool.submit(write_run, job)))
        except RuntimeError:  # the pool is shut down or broken: here, then
            self._done.append(write_run(job))

    def _collect(self, pending: tuple) -> None:
        from concurrent.futures.process import BrokenProcessPool

        job, future = pending
        try:
            self._done.append(future.result())
        except BrokenProcessPool:  # a worker died: the run again, here (a write lands once either way)
            self._done.append(write_run(job))

    @property
    def superseded(self) -> int:
        """Writes skipped so far: the ledger held newer bytes by then."""
        return sum(done[1] for done in self._done)

    def close(self) -> None:
        """Wait until every submitted write has landed (or failed)."""
        self._send()
        while self._futures:
            self._collect(self._futures.popleft())

    def take(self) -> tuple[dict[str, int], list[tuple[str, str]], list[tuple]]:
        self.close()
        written = {"sidecars_written": 0, "sessions_written": 0}
        errors: list[tuple[str, str]] = []
        seen: list[tuple] = []
        for counts, _, failed, fresh in self._done:
            for kind, n in counts.items():
                written[kind] += n
            errors += failed
            seen += fresh
        self._done = []
        return written, errors, seen
