"""A scoring pass: gather inputs, run the pure scorer on those whose inputs hash
changed (in worker processes for bulk work), append ``score.computed`` events in
batches, and write the sidecars after each commit (a sidecar never runs ahead of
the ledger)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

from ..config import IterationLogSource
from ..output import sidecars
from ..process.ahead import made_ahead
from ..process.parallel import chunk_size, pmap, workers
from ..sources.git import GitRepo
from ..store import db as store
from ..store.events import Event
from .context import Context
from .inputs import Inputs
from .outcome import BATCH, Outcome, Progress
from .sidecar_sync import AUTO_FSYNC_MAX, SidecarSync


class ScoringPass:
    def __init__(self, ctx: Context, inputs: Inputs, sync: SidecarSync) -> None:
        self.ctx = ctx
        self.inputs = inputs
        self.sync = sync

    def score(self, src: IterationLogSource, iterations: list[int] | None = None, *,
              progress: Progress | None = None, finish: Callable[[], None] | None = None,
              between: Callable[[], Outcome] | None = None, sync_all: bool = False) -> Outcome:
        """Score ``iterations`` (or all) and write what changed. ``finish`` runs inside
        the pass's last transaction (its own one when nothing needed a new score, or when
        only unchanged iterations came after the last full batch: ``_batches``);
        ``between`` after each batch but the last (its report added to the pass's).
        ``sync_all``: the pass ends by bringing every sidecar of the source in line, not
        only those of ``iterations`` (a caller that would sync them all next: one pass over
        the sidecars, which skips those it has just written, instead of two)."""
        if why := self.ctx.roots.refused(src):
            return Outcome(errors=[why])
        ctx, sync = self.ctx, self.sync
        report = Outcome()
        if iterations is None or len(iterations) > SWEEP_FROM:
            # the close-task hook does not list the directory (its cost grew with the log):
            # a temp file a killed hook left is removed by the next full pass or reconcile
            sync.sweep(src)
        version = ctx.rubric.version
        marker = ctx.cfg.scoring.linked_traces_marker
        parts = self._parts(src, iterations)
        total = sum(len(p) for p in parts if p is not None) if parts != [None] else self._count(src)
        # at most ``total`` scores change; each is committed as its batch fills, and the inputs
        # are gathered a part at a time (a pass of 100,000 never holds all of them)
        results = [0]  # how many jobs have given their result
        todo = self._events(src, version, self._jobs(src, version, marker, parts), total, report, results)
        fsync = sync.fsync(total)
        writer = repo = None
        sessions: set[str] = set()  # written here, from the bytes the projector rendered
        written: set[int] = set()

        # sidecar paths as strings: a Path costs ~3 us to join here and ~7 us to unpickle in
        # the worker that writes it (10,000 of each in a backfill of 10,000)
        prefix = os.path.join(src.path, "")

        def write(path: str, data: bytes, kind: str, key: tuple) -> None:
            nonlocal writer
            if writer is None and total > AUTO_FSYNC_MAX:  # made at the first write: a bulk writer
                # waits for the pool, whose start the first part's gathering overlaps (``pmap``)
                writer = sync.writer or sync.bulk_writer(total)
            if writer is not None:
                writer.submit(path, data, fsync, kind, key)
            elif sync.write_scored(path, data, report, fsync, version):
                setattr(report, kind, getattr(report, kind) + 1)

        batches = _batches(todo, lambda: results[0] >= total)
        done, finished = 0, False
        try:
            # git answers the parts' commits from now on (before a bulk writer waits for the pool
            # to start: the first part's gathering waits for those answers, the workers for it)
            repo = self._ahead(src, parts)
            if total <= AUTO_FSYNC_MAX and sync.writer is not None:
                sync.writer.wait()  # a direct write must not be overtaken by an older queued one
            for batch, last in batches:
                with ctx.log.batch() as committed:
                    new = committed.append(batch)
                    report.events += len(new)
                    report.scored += len(new)
                    if finish is not None and last:
                        finish()
                        finished = True
                for ev in batch:  # after the commit: a sidecar never runs ahead of the ledger
                    written.add(ev.payload["iteration"])
                    write(prefix + ev.payload["sidecar"], ev.extra["sidecar_bytes"], "sidecars_written",
                          ("scores", src.id, ev.payload["iteration"], version, ev.extra["sidecar_sha256"]))
                for (_, session_id, v), (data, sha) in sorted(committed.session_bytes.items()):
                    if v != version:
                        continue
                    write(prefix + sidecars.session_sidecar_name(session_id), data, "sessions_written",
                          ("sessions", src.id, session_id, version, sha))
                    sessions.add(session_id)
                done += len(batch)
                if progress:
                    progress(done, total)
                if between is not None and not last:
                    report.add(between())
                ctx.check_stop()
        finally:
            batches.close()  # the parts' thread ends with the pass (``made_ahead``), not when collected
            todo.close()
            if repo is not None:
                repo.join_ahead()
            if writer is not None and writer is not sync.writer:
                writer.close()
                report.add(sync.writes_outcome(*writer.take()))
        if finish is not None and not finished:  # no batch was known to be the last: its own transaction
            with ctx.log.batch():
                finish()
        # the sidecars of the scores that stood (the ledger may hold them from an earlier
        # activation of this rubric, or a file was edited): still brought in line
        report.add(sync.sync(src, None if sync_all else iterations, skip_iterations=written, skip_sessions=sessions))
        return report

    def _parts(self, src: IterationLogSource, iterations: list[int] | None) -> list[list[int] | None]:
        """The iterations to gather together: all at once (None: the whole log) up to
        ``GATHER_CHUNK``, else consecutive runs of ``FIRST_PART``, twice that, … up to
        ``GATHER_CHUNK`` (each gathers as a partial log: its transcript windows start where
        the iteration before it ends)."""
        if iterations is not None and len(iterations) <= GATHER_CHUNK:
            return [iterations]
        its = sorted(iterations) if iterations is not None else [r[0] for r in self.ctx.conn.execute(
            "SELECT iteration FROM iterations WHERE source = ? ORDER BY iteration", (src.id,))]
        if iterations is None and len(its) <= GATHER_CHUNK:
            return [None]
        # a short first part: the workers wait for nothing but it to start scoring; then each
        # part twice the last (up to GATHER_CHUNK), so that gathering the next part takes
        # no longer than the workers' queued chunks of this one (a part of 5,000 right after
        # the first 1,000 would leave them idle ~0.3 s at 10,000). Each a whole number of
        # the workers' chunks: a chunk that spans two parts waits for the second to be
        # gathered (the second worker's first chunk did: ~0.25 s of a backfill of 10,000).
        step = chunk_size(len(its))
        first = max(workers() * step, FIRST_PART // step * step)  # a chunk for each worker at least
        most = max(first, GATHER_CHUNK // step * step)
        parts, at, size = [], 0, first
        while at < len(its):
            parts.append(its[at:at + size])
            at, size = at + size, min(2 * size, most)
        return parts

    def _ahead(self, src: IterationLogSource, parts: list[list[int] | None]) -> GitRepo | None:
        """A pass gathered in several parts has git answer each part's commits ahead of
        it (``GitRepo.ahead``): what each resolves to, and the files changed by those of
        iterations with a task (only they are asked: ``Inputs.gather``). The repository,
        whose thread the pass joins."""
        if len(parts) < 2:
            return None
        of = {it: (c, task) for it, c, task in self.ctx.conn.execute(
            "SELECT iteration, commit_ref, task_id FROM iterations WHERE source = ? AND iteration IN"
            " (SELECT value FROM json_each(?))", (src.id, json.dumps([it for p in parts for it in p or ()])))
            if isinstance(c, str) and c}
        ahead = []
        for part in parts:
            known = [of[it] for it in part or () if it in of]
            ahead.append(([c for c, _ in known], {c for c, task in known if isinstance(task, str) and task.strip()}))
        repo = self.ctx.repo(src)
        repo.ahead(ahead)
        return repo

    def _count(self, src: IterationLogSource) -> int:
        return self.ctx.conn.execute("SELECT count(*) FROM iterations WHERE source = ?", (src.id,)).fetchone()[0]

    def unverified(self, src: IterationLogSource) -> list[int]:
        """Iterations whose score under the active rubric came in by ``import`` and has
        not been scored here yet (nearly always none: one indexed look-up)."""
        return [r[0] for r in self.ctx.conn.execute(
            "SELECT s.iteration FROM imported_scores u CROSS JOIN scores s ON s.seq = u.seq"
            " WHERE s.source = ? AND s.rubric_version = ?", (src.id, self.ctx.rubric.version))]

    def not_reusable(self, src: IterationLogSource, previous: str) -> list[int]:
        """Iterations whose score under the active rubric was not computed from the
        inputs their score under ``previous`` names (no score, an inputs key missing or
        different, or a score under ``previous`` that came in by import)."""
        return [r[0] for r in self.ctx.conn.execute(
            "SELECT i.iteration FROM iterations i"
            " LEFT JOIN scores x ON x.source = i.source AND x.iteration = i.iteration AND x.rubric_version = ?"
            " LEFT JOIN scores p ON p.source = i.source AND p.iteration = i.iteration AND p.rubric_version = ?"
            " WHERE i.source = ? AND (x.inputs_key IS NULL OR p.inputs_key IS NOT x.inputs_key"
            " OR p.seq IN (SELECT seq FROM imported_scores))", (self.ctx.rubric.version, previous, src.id))]

    def _jobs(self, src: IterationLogSource, version: str, marker: bool, parts: list) -> Iterator[tuple]:
        """Each iteration's scoring job, a part's inputs gathered when the workers come to
        it. A pass in parts gathers each next part on a thread with a connection of its
        own (``made_ahead``) while this one commits the scores of the last: gathering and
        committing are mostly SQLite and git, outside the interpreter's lock (a backfill of
        10,000 left the workers idle ~40 % of the time when one thread did both)."""
        # (no file: a ledger in memory; a pass in one part, the hook's, asks nothing more)
        path = len(parts) > 1 and self.ctx.conn.execute(
            "SELECT file FROM pragma_database_list WHERE name = 'main'").fetchone()[0]
        if not path:
            for part in parts:
                yield from self._part_jobs(self.inputs, src, version, marker, part)
            return
        conn = store.connect_readonly(path)
        try:
            inputs = self.inputs.reading(conn)
            yield from made_ahead((self._part_jobs(inputs, src, version, marker, part) for part in parts),
                                  name="agentledger-gather")
        finally:
            conn.close()

    def _part_jobs(self, inputs: Inputs, src: IterationLogSource, version: str, marker: bool,
                   part: list[int] | None) -> list[tuple]:
        """One part's jobs, read through ``inputs``' connection (the gathering thread's own)."""
        self.ctx.check_stop()  # before each part, the first included: a stop need not wait for a batch's commit
        sql = ("SELECT s.iteration, s.inputs_hash, s.seq, u.seq FROM scores s LEFT JOIN imported_scores u"
               " ON u.seq = s.seq WHERE s.source = ? AND s.rubric_version = ?")
        args: list = [src.id, version]
        if part is not None:
            sql += " AND s.iteration IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(part))
        existing, replaces = {}, {}
        for it, digest, seq, imported_seq in inputs.conn.execute(sql, args):
            if imported_seq is None:
                existing[it] = digest
                # the score replaced, by its inputs and its seq: inputs that go back and forth
                # (A, B, A, B) make a new score each time, not one the key already names
                replaces[it] = f"{digest}@{seq}"
            else:  # an imported score is scored again here, from the inputs, before it counts
                replaces[it] = f"imported-{imported_seq}"
        return [(version, marker, g, existing.get(g.iteration), replaces.get(g.iteration))
                for g in inputs.gather(src, part)]

    def _events(self, src: IterationLogSource, version: str, jobs: Iterator[tuple], total: int,
                report: Outcome, results: list[int]) -> Iterator[Event]:
        """The ``score.computed`` events of the iterations whose inputs hash changed, as
        the workers compute them (a pass of 100,000 never holds them all); ``results[0]``
        counts the jobs done."""
        from .score_job import score_job  # the scorer: imported by a pass that scores (and by its workers)

        for result in pmap(score_job, jobs, total=total):
            results[0] += 1
            if result is None:
                report.unchanged += 1
                continue
            # ``payload``: the fields the projection reads; the event's whole payload is its
            # JSON text (what is stored, hashed and shipped)
            payload, payload_json, payload_hash, data, data_sha, signals, prev = result
            it = payload["iteration"]
            yield Event("score.computed", f"{src.id}:score:{it}", src.id,
                        f"score|{src.id}|{it}|{version}|{payload['inputs_hash']}|{prev or '-'}", payload,
                        content_hash=payload_hash, source_path=sidecars.iteration_sidecar_name(it),
                        extra={"json": payload_json, "sidecar_bytes": data, "sidecar_sha256": data_sha,
                               "signals": signals})


SWEEP_FROM = 8  # a pass of more iterations than this removes killed writers' temp files first
GATHER_CHUNK = 5000  # iterations whose inputs are gathered together, at most
FIRST_PART = 1000  # ... the first part of a pass in parts (~0.1 s at 10,000 iterations), each next twice the last


def _batches(events: Iterator[Event], over: Callable[[], bool]) -> Iterator[tuple[list[Event], bool]]:
    """Each batch as soon as it is full, and whether it is the last (``finish`` runs in
    the last transaction): ``over`` says every job has given its result. A full batch
    followed only by unchanged iterations is not known to be the last; the pass then
    runs ``finish`` in a transaction of its own. (Waiting for the next batch to know
    kept the first commit, and the workers' next chunks, one batch late: ~0.4 s of a
    backfill of 10,000.)"""
    batch: list[Event] = []
    for ev in events:
        batch.append(ev)
        if len(batch) >= BATCH:
            yield batch, over()
            batch = []
    if batch:
        yield batch, True
