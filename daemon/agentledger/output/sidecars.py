"""Score sidecars: render yaml.v3-identical bytes, write them atomically.

The writer never decides a score: it renders what the ledger says. Writes are
skipped when the bytes on disk are already right, go through a temp file in
the same directory (fsynced, then ``os.replace``, then the directory fsynced),
and never follow a symlink at the target.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..reference.yamlv3.emit import dump, format_scalar
from .. import names
from ..process import lifetime
from ..scoring.breakdown import Row as BreakdownRow  # one row type from scorer to sidecar
from . import score_rows
from .spare import Spares

TEMP_PREFIX = ".agentledger-"
TEMP_SUFFIX = ".tmp"


def iteration_sidecar_name(iteration: int) -> str:
    return names.iteration_file(names.SCORE, iteration)


session_sidecar_name = names.session_file
unsafe_session_id = names.unsafe_session_id


def render_iteration(iteration: int, rubric_version: str, scored: bool, value: float, band: str,
                     breakdown: Sequence[BreakdownRow], linked_traces_marker: bool = False) -> bytes:
    """``iter-N.score.yaml`` bytes (yaml.v3 layout: see ``goyaml.emit``; this is the
    same emission unrolled for the one fixed shape, since every score pays for it)."""
    return render_iteration_rows(iteration, rubric_version, scored, value, band, score_rows.rows_text(breakdown),
                                 linked_traces_marker)


def render_iteration_rows(iteration: int, rubric_version: str, scored: bool, value: float, band: str,
                          rows: list[str], linked_traces_marker: bool = False) -> bytes:
    """``render_iteration`` with each breakdown row's text given (``row_text``)."""
    s = format_scalar
    out = [f"iteration: {iteration}\nrubric_version: {s(rubric_version, 0)}\nscored: {s(scored, 0)}\n"
           f"value: {s(value, 0)}\nband: {s(band, 0)}\n", "breakdown:\n" if rows else "breakdown: []\n", *rows]
    if linked_traces_marker:
        out.append("linked_traces_to_outcomes: true\n")
    return "".join(out).encode("utf-8")


def render_iteration_generic(iteration: int, rubric_version: str, scored: bool, value: float, band: str,
                             breakdown: Sequence[BreakdownRow], linked_traces_marker: bool = False) -> bytes:
    """The same document through the generic emitter (tests check both agree)."""
    rows = []
    for r in breakdown:
        row: list[tuple[str, object]] = [("signal", r.signal), ("label", r.label),
                                         ("present", r.present), ("sub_score", r.sub_score)]
        if r.detail:
            row.append(("detail", r.detail))
        row += [("nominal_weight", r.nominal_weight), ("effective_weight", r.effective_weight),
                ("contribution", r.contribution)]
        rows.append(row)
    doc: list[tuple[str, object]] = [
        ("iteration", iteration), ("rubric_version", rubric_version), ("scored", scored),
        ("value", value), ("band", band), ("breakdown", rows),
    ]
    if linked_traces_marker:
        doc.append(("linked_traces_to_outcomes", True))
    return dump(doc)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SessionEntry:
    iteration: int
    scored: bool
    value: float
    band: str


def session_value(entries: Sequence[SessionEntry], band_of) -> tuple[bool, float, str]:
    """Mean of the scored iterations' values, summed in iteration order."""
    scored = [e for e in entries if e.scored]
    if not scored:
        return False, 0.0, "unscored"
    total = 0.0
    for e in scored:
        total += e.value
    value = total / len(scored)
    return True, value, band_of(value)


def render_session(session_id: str, rubric_version: str, entries: Sequence[SessionEntry],
                   scored: bool, value: float, band: str) -> bytes:
    """``session-<id>.score.yaml`` bytes, the generic emission unrolled like
    ``render_iteration``'s: a change to one iteration re-renders its session."""
    s = format_scalar
    out = [f"session_id: {s(session_id, 0)}\nrubric_version: {s(rubric_version, 0)}\n"]
    if not entries:
        out.append("iterations: []\n")
    else:
        out.append("iterations:\n")
        out += [f"    - {e.iteration}\n" for e in entries]
    out.append(f"scored: {s(scored, 0)}\nvalue: {s(value, 0)}\nband: {s(band, 0)}\n")
    if not entries:
        out.append("per_iteration: []\n")
    else:
        out.append("per_iteration:\n")
        out += [f"    - iteration: {e.iteration}\n      scored: {'true' if e.scored else 'false'}\n"
                f"      value: {s(e.value, 4)}\n      band: {s(e.band, 4)}\n" for e in entries]
    return "".join(out).encode("utf-8")


def render_session_generic(session_id: str, rubric_version: str, entries: Sequence[SessionEntry],
                           scored: bool, value: float, band: str) -> bytes:
    """The same document through the generic emitter (tests check both agree)."""
    doc = [
        ("session_id", session_id), ("rubric_version", rubric_version),
        ("iterations", [e.iteration for e in entries]),
        ("scored", scored), ("value", value), ("band", band),
        ("per_iteration", [[("iteration", e.iteration), ("scored", e.scored), ("value", e.value),
                            ("band", e.band)] for e in entries]),
    ]
    return dump(doc)  # type: ignore[arg-type]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class SidecarRefused(OSError):
    pass


def write_atomic(path: Path | str, data: bytes, *, durable: bool = True, compare: bool = True,
                 seen: list | None = None, spares: Spares | None = None) -> bool:
    """Write ``data`` to ``path`` unless it already holds exactly that; True if written.
    ``compare=False``: the caller knows the file differs (a sync compared its sha256), so
    it is not read again first. ``seen``: the file's (path, dev, ino, size, mtime_ns,
    sha256) is appended once it holds ``data``, taken from the file this call wrote or
    read (``fstat``), so that the next sync knows it without reading it back.
    ``spares``: a run of writes (``output/spare.py``): the new file is swapped with the
    old one, whose inode takes the next write when nobody else can see it.

    A symlink (or any non-regular file) at ``path`` is refused rather than
    followed or replaced: the log directory is someone else's tree."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise SidecarRefused(f"{path}: not a regular file (symlink or other); refusing to write")
        if compare and st.st_size == len(data):
            try:
                # (not waiting: a FIFO swapped in since the lstat above has no writer)
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as fh:
                    if fh.read() == data:
                        if seen is not None:  # what was read is what this file holds
                            o = os.fstat(fd)
                            seen.append((path, o.st_dev, o.st_ino, o.st_size, o.st_mtime_ns, sha256(data)))
                        return False
            except OSError:
                pass
    directory = os.path.dirname(path)
    reused = spares.take(directory) if spares is not None else None
    fd, tmp = reused[:2] if reused else _temp_file(directory)
    try:
        try:
            if reused is None and data and st is not None:
                # Allocate the blocks now: a rename over an existing file makes ext4
                # allocate any still-delayed blocks of the new one inside the rename
                # (auto_da_alloc); up front it costs ~40% less per sidecar.
                try:
                    os.posix_fallocate(fd, 0, len(data))
                except OSError:
                    pass
            if reused is None or stat.S_IMODE(reused[2].st_mode) != 0o644:
                os.fchmod(fd, 0o644)
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.pwrite(fd, view[done:], done)
            if reused is not None and reused[2].st_size > len(data):
                os.ftruncate(fd, len(data))
            if durable:
                os.fsync(fd)
            if seen is not None:  # a rename keeps the inode and the modification time
                o = os.fstat(fd)
                key = (o.st_dev, o.st_ino, o.st_size, o.st_mtime_ns)
        finally:
            os.close(fd)
        if not (st is not None and spares is not None and spares.swap(tmp, path)):
            os.replace(tmp, path)
        if seen is not None:
            seen.append((path, *key, sha256(data)))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        dfd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return True


_serial = itertools.count()


def _temp_file(directory: Path) -> tuple[int, str]:
    """A new temp file beside the sidecars, open for writing: named with our pid (so a run
    after us can tell a killed writer's leftover from a live writer's file,
    ``remove_stale_temps``) and a serial number, made with ``O_EXCL`` and never through a
    link. mkstemp's random names cost more than the write itself in a bulk rewrite."""
    prefix = os.path.join(directory, lifetime.stamped(TEMP_PREFIX))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = f"{prefix}{next(_serial)}{TEMP_SUFFIX}"
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:  # a leftover of a dead process that had our pid
            continue
    import tempfile

    return tempfile.mkstemp(prefix=lifetime.stamped(TEMP_PREFIX), suffix=TEMP_SUFFIX, dir=directory)


def remove_stale_temps(directory: Path, names: list[str] | None = None) -> int:
    """Remove our temp files that a killed writer left in ``directory`` (only names
    with our prefix, and only when the process named in them is gone); how many.
    ``names``: the directory's names from a listing just made, if the caller has one."""
    return len(lifetime.remove_stale(directory, TEMP_PREFIX, TEMP_SUFFIX, names))


def is_temp_name(name: str) -> bool:
    """Temp files of ours and of the reference's writers (ignored by every scan)."""
    return (
        (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX))
        or (name.startswith(".fsops-") and name.endswith(".tmp"))
        or (name.startswith(".score-") and name.endswith(".yaml.tmp"))
        or name.endswith(".yaml.tmp")
    )


def write_many(items, current: set[tuple] | None = None, *,
               compare: bool = True) -> tuple[dict[str, int], int, list[tuple[str, str]], list[tuple]]:
    """A run of writes, (path, bytes, fsync, kind, key) each, one after another, each
    swapped into place (``Spares``); one whose key is not in ``current`` (when given:
    the keys still the ledger's) is skipped. Counts written by kind, how many were
    skipped, (path, error) of those that failed, and what each written file is
    (``write_atomic``'s ``seen``). The caller holds the sidecar lock."""
    written = {"sidecars_written": 0, "sessions_written": 0}
    superseded, errors, seen = 0, [], []
    with Spares() as spares:
        for path, data, durable, kind, key in items:
            if key is not None and current is not None and key not in current:
                superseded += 1
                continue
            try:
                written[kind] += write_atomic(path, data, durable=durable, compare=compare, seen=seen, spares=spares)
            except OSError as exc:
                errors.append((str(path), str(exc)))
    return written, superseded, errors, seen


class BackgroundWriter:
    """Writes sidecars on a thread while the caller goes on scoring and committing.

    A write is mostly kernel time, which releases the GIL, so a bulk rewrite
    overlaps it with CPU work instead of paying it serially. One queue,
    one thread: writes land in the order they were submitted, so the last
    write of a path is the newest bytes. Sidecars are derived state: if the
    process dies with writes queued, the next run finds their bytes differ from
    the ledger and writes them then."""

    BATCH = 256  # writes a hold of the gate covers at most

    def __init__(self, still_current: Callable[[list[tuple]], set[tuple]] | None = None,
                 gate: Callable[[], contextlib.AbstractContextManager] | None = None, *, compare: bool = True) -> None:
        """``still_current(keys)``, when given, is asked on the writer thread before
        writes submitted with a key, and answers which keys are: one left out (the
        ledger has moved on, e.g. another process scored the same iteration since, or
        another rubric was activated) is skipped, so an old queued write cannot land
        over a newer file. ``gate()`` is held around the question and those writes
        (the ledger's sidecar lock).
        ``compare=False``: every write is known to change its file (``write_atomic``)."""
        import queue
        import threading

        self._still_current = still_current
        self._compare = compare
        self._gate = gate or contextlib.nullcontext
        self._queue: queue.Queue = queue.Queue(maxsize=4096)
        self._lock = threading.Lock()
        self.written: dict[str, int] = {"sidecars_written": 0, "sessions_written": 0}  # by kind
        self.superseded = 0  # writes skipped: the ledger held newer bytes by then
        self.errors: list[tuple[str, str]] = []  # (path, why it could not be written)
        self.seen: list[tuple] = []  # what each written file is (``write_atomic``'s ``seen``)
        self._thread = threading.Thread(target=self._run, name="agentledger-sidecars", daemon=True)
        self._thread.start()

    def submit(self, path: Path, data: bytes, durable: bool, kind: str = "sidecars_written",
               key: tuple | None = None) -> None:
        self._queue.put((path, data, durable, kind, key))

    def _run(self) -> None:
        import queue

        while True:
            items = [self._queue.get()]
            while items[-1] is not None and len(items) < self.BATCH:  # what else is queued
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(items[:-1] if items[-1] is None else items)
            finally:
                for _ in items:
                    self._queue.task_done()
            if items[-1] is None:
                return

    def _write(self, items: list[tuple]) -> None:
        """Write a run of queued sidecars under one hold of the gate, after one question
        of which are still current: a lock and two queries a write cost a backfill of
        10,000 ~0.8 s of this thread. The gate is held for at most ``BATCH`` writes."""
        if not items:
            return
        with self._gate():
            keys = [it[4] for it in items if it[4] is not None]
            current = self._still_current(keys) if keys and self._still_current is not None else None
            written, superseded, errors, fresh = write_many(items, current, compare=self._compare)
        with self._lock:
            for kind, n in written.items():
                self.written[kind] += n
            self.superseded += superseded
            self.errors += errors
            self.seen += fresh

    def wait(self) -> None:
        """Block until every write submitted so far has landed."""
        self._queue.join()

    def take(self) -> tuple[dict[str, int], list[tuple[str, str]], list[tuple]]:
        """What landed since the last ``take``: counts by kind, (path, error) of what did
        not, and what each written file is (for ``sidecar_seen``)."""
        with self._lock:
            written, errors, seen = self.written, self.errors, self.seen
            self.written, self.errors, self.seen = dict.fromkeys(written, 0), [], []
        return written, errors, seen

    def close(self) -> None:
        """Wait until every submitted sidecar is written, then stop the thread."""
        self._queue.put(None)
        self._thread.join()
