"""Tailing the JSONL sources (vally results, agent transcripts) from their stored
positions, exactly once: each batch's events and the position after it commit
together. A large backlog is parsed by the worker processes in line-aligned
chunks while this process commits them in order.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from collections.abc import Callable
from pathlib import Path

from ..config import VallySource
from ..store import db as store
from ..store.events import Event
from ..store.log import TailCheckpoint
from ..store.projections import PreparedTrials
from . import commit
from .context import Context
from .outcome import Outcome

# A backlog of at least this many bytes reports its progress (when someone listens).
SHOWN_BACKLOG = 8 << 20


class Tailing:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # (bytes done, bytes to read, what): set by a command on a terminal for a large
        # catch-up; the daemon leaves it None
        self.progress: Callable[[int, int, str], None] | None = None

    def _shown(self, path: Path, start: int) -> Callable[[int], None] | None:
        """Where a file's read position goes, when its backlog is large enough to show."""
        if self.progress is None:
            return None
        try:
            total = os.stat(path).st_size - start
        except OSError:
            return None
        if total < SHOWN_BACKLOG:
            return None
        show = self.progress
        return lambda offset: show(min(offset - start, total), total, f"reading {path.name}")

    def vally(self, src: VallySource) -> Outcome:
        """Tail every results/run-summary file under ``src`` from its stored position."""
        from ..sources.vally import events as vally

        if not src.path.is_dir():
            return Outcome(errors=[f"{src.path}: vally directory does not exist"])
        wanted = {d for s in self.ctx.cfg.iteration_logs for d in s.vally_transcripts}
        if src.path in wanted:
            return self._tail(src.id, src.path, vally.discover(src.path),
                              vally.events_for_with_trajectories, mode="jsonl+turns", kind="vally")
        return self._tail(src.id, src.path, vally.discover(src.path), vally.events_for, kind="vally")

    def transcripts(self, directory: Path) -> Outcome:
        """Tail the ``*.jsonl`` transcripts directly in ``directory`` (a missing one is skipped)."""
        from ..sources.transcripts import events as transcripts

        if not directory.is_dir():
            return Outcome()
        return self._tail(str(directory), directory, transcripts.discover(directory),
                          transcripts.events_for, complete=transcripts.complete_line, kind="transcript")

    def _tail(self, source: str, root: Path, rels: list[str], events_for, mode: str = "jsonl",
              complete: Callable[[bytes], bool] | None = None, kind: str = "vally") -> Outcome:
        """Tail ``rels`` under ``root``. ``mode`` is recorded with each file's position:
        a file last read in another mode (e.g. before its trajectories were opted in)
        is read again from the start; idempotency keys keep the old events unique.
        ``complete``: which unterminated last lines count already (``jsonl.tail``).
        A file that resolves outside ``root`` is quarantined by name, never read."""
        from ..sources import confine, jsonl

        report = Outcome()
        for rel in rels:
            try:
                path = confine.resolve_within(root / rel, root)
            except confine.Outside as exc:
                self._refuse(source, root, rel, str(exc), kind, report)
                continue
            row = self.ctx.conn.execute(
                "SELECT byte_offset, line_no, fingerprint, kind, open_line FROM source_checkpoints"
                " WHERE source = ? AND path = ?", (source, rel)).fetchone()
            if row is not None and row[3] != mode:
                row = None
            previous = ({"offset": row[0], "line_no": row[1], "fingerprint": row[2]} if row else None)
            pos = jsonl.Position(row[0], row[1], row[2], row[4]) if row else jsonl.Position()
            try:
                shown = self._shown(path, pos.offset)
                moved = None if pos.open else self._in_parallel(source, path, rel, pos, events_for,
                                                                report, mode, shown)
                if moved is not None:
                    pos, previous = moved, None
                batches = jsonl.tail(path, pos, max_line_bytes=self.ctx.cfg.limits.max_line_bytes,
                                     max_batch_bytes=16 << 20, max_lines=5000, complete=complete)
                for batch in batches:
                    self._commit(source, rel, batch, events_for(source, rel, batch, previous), report, mode)
                    previous = None  # a reset is reported once, on the batch that restarted
                    if shown:
                        shown(batch.end.offset)
            except OSError as exc:  # vanished or unreadable: keep its history, say so
                report.errors.append(f"{root / rel}: {exc.strerror or exc}")
        return report

    def _refuse(self, source: str, root: Path, rel: str, reason: str, kind: str, report: Outcome) -> None:
        """One quarantine record for a link that leads outside the tree (again only
        once the link itself changes)."""
        from ..sources.vally.events import _quarantine

        try:
            st = os.lstat(root / rel)
            tag = f"outside-{st.st_ino}-{st.st_mtime_ns}"
        except OSError:
            tag = "outside"
        with commit.transaction(self.ctx) as batch:
            commit.record(batch, [_quarantine(source, rel, 0, 0, tag, reason, kind)], report, root / rel)

    def _in_parallel(self, source: str, path: Path, rel: str, pos, events_for, report: Outcome, mode: str,
                     shown: Callable[[int], None] | None = None):
        """A large backlog (a results file copied in whole, a first ingest) is parsed by
        the worker processes in line-aligned chunks while this process commits them in
        order, one transaction per chunk with its position: the same events and the
        same exactly-once checkpoints as the sequential reader, on every core.

        Workers number lines within their chunk; a chunk whose events name a line
        (a quarantined one) is parsed again here with the true line numbers, which
        only this process knows. Returns the position after the last commit (None
        when nothing was done this way); the sequential reader takes the rest (the
        partial last line, a reset, an over-long line)."""
        from ..sources import confine, jsonl

        try:
            if os.stat(path).st_size - pos.offset < parallel_tail_min_bytes():
                return None  # the usual case (a few new lines): no pool, no imports
        except OSError:
            return None  # the sequential reader reports it
        from ..process import parallel

        if parallel.executor() is None:
            return None
        chunks = jsonl.plan(path, pos, min_bytes=parallel_tail_min_bytes(), block=parallel_tail_block())
        first = next(chunks, None)
        if first is None:
            return None
        st = os.stat(path)
        stat_ = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        limit = self.ctx.cfg.limits.max_line_bytes
        jobs = ((events_for, source, rel, str(path), chunk, limit) for chunk in itertools.chain([first], chunks))
        moved, line_no = None, pos.line_no

        def commit_one(result) -> None:
            nonlocal moved, line_no
            chunk, n_lines, events = result
            if events is None:  # they name line numbers: parse again here, where those are known
                lines = jsonl.chunk_lines(path, chunk, max_line_bytes=limit, line_base=line_no)
                events = events_for(source, rel, jsonl.Batch(items=lines), None)
            line_no += n_lines
            moved = jsonl.Position(chunk.end, line_no, jsonl.fingerprint(fh, chunk.end))
            self._commit(source, rel, jsonl.Batch(end=moved, size=st.st_size, stat=stat_), events, report, mode)
            if shown:
                shown(chunk.end)

        with (no_cyclic_gc(), confine.open_checked(path) as fh,
              store.bulk_commits(self.ctx.conn) as last_commit_follows):
            held = None  # each result is committed once the next one is in: the last is known
            for result in parallel.imap_bounded(_tail_chunk_job, jobs):
                if held is not None:
                    commit_one(held)
                held = result
            last_commit_follows()
            commit_one(held)
        return moved

    def _commit(self, source: str, rel: str, batch, events: list[Event] | PreparedTrials, report: Outcome,
                mode: str = "jsonl") -> None:
        """The events of one batch (or a worker's prepared form of them) and the position
        after it: one transaction (exactly once)."""
        if not events and batch.end.offset == 0 and batch.reset is None and batch.reopened is None:
            return
        checkpoint = TailCheckpoint(source, rel, mode, batch.stat, batch.end)
        with commit.transaction(self.ctx) as log_batch:
            if isinstance(events, PreparedTrials):
                report.events += log_batch.append_prepared(events, checkpoint=checkpoint)
            else:
                commit.record(log_batch, events, report, rel, checkpoint=checkpoint)
        report.files_read += 1
        self.ctx.check_stop()  # a long catch-up ends here on the daemon's SIGTERM; its position is committed


@contextlib.contextmanager
def no_cyclic_gc():
    """Bulk parsing makes many short-lived, acyclic objects (freed by reference
    counting); the cyclic collector's passes over them cost ~7 % and find nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parallel_tail_min_bytes() -> int:
    """Backlog from which a tailed file is parsed by the worker processes (64 MiB;
    ``AGENTLEDGER_PARALLEL_TAIL_BYTES`` overrides it, e.g. for tests)."""
    return int(os.environ.get("AGENTLEDGER_PARALLEL_TAIL_BYTES") or 64 << 20)


def parallel_tail_block() -> int:
    """Bytes per chunk (and per transaction) of a parallel catch-up: 16 MiB
    (``AGENTLEDGER_PARALLEL_TAIL_BLOCK`` overrides it, e.g. for tests)."""
    return int(os.environ.get("AGENTLEDGER_PARALLEL_TAIL_BLOCK") or 16 << 20)


def _tail_chunk_job(job: tuple):
    """One planned chunk of a tailed file → (chunk, its line count, its events: prepared for
    the writer when they are all plain trials), or events None when any would carry a
    line number (quarantine), which only the caller knows. Runs in a worker process."""
    from ..sources import jsonl

    events_for, source, rel, path, chunk, max_line_bytes = job
    n_lines = 0

    def counted():
        nonlocal n_lines
        for item in jsonl.chunk_lines(path, chunk, max_line_bytes=max_line_bytes):
            n_lines = item.line_no
            yield item

    with no_cyclic_gc():
        events = events_for(source, rel, jsonl.Batch(items=counted()), None)
        if any(ev.type == "source.quarantined" for ev in events):
            return chunk, n_lines, None
        return chunk, n_lines, PreparedTrials.of(events) or events
