"""Ingest of iteration-log directories: which files changed, their events, and the
verification artifacts and plans the records point at in the repository.

Files are observed (stat, read, parse) in worker processes for bulk work and
committed here in batches, each with the checkpoints of its files.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from ..config import IterationLogSource, VallySource
from ..process.parallel import pmap
from ..sources.iterlogs import files as S
from ..sources.git import GitRepo
from ..sources.iterlogs.listing import list_log_dir
from ..sources.iterlogs.artifacts import REVIEW_DECISION, TASKS, VERIFIER_RESULT, resolve_artifact_path
from ..store.log import FileCheckpoint
from ..store.touched import Touched
from . import commit
from .context import Context
from .inputs import Inputs
from .observe_job import observe_job
from .outcome import BATCH, Outcome
from .scan_marks import ScanMarks
from .tailing import Tailing

PREFETCH_FROM = 1000  # iterations a full scan changed from which their commits are resolved while it reads artifacts
_LOG_KINDS = frozenset(S.LOG_KINDS)
# a checkpoint query narrowed to one side: log files ("IN") or artifacts and plans ("NOT IN"),
# the parameter ``_LOG_KINDS_JSON``
_ON_SIDE = " AND kind %s (SELECT value FROM json_each(?))"
_LOG_KINDS_JSON = json.dumps(S.LOG_KINDS)
_ARTIFACT_KINDS = (VERIFIER_RESULT, REVIEW_DECISION, TASKS)
# the artifacts' and plans' checkpoints, as migration 0027's partial index names them (the same
# text: SQLite uses that index only for a condition that implies its own)
_ARTIFACT_SIDE = " AND kind IN (%s)" % ", ".join(f"'{k}'" for k in _ARTIFACT_KINDS)


class IterationLogs:
    def __init__(self, ctx: Context, inputs: Inputs, tailing: Tailing, marks: ScanMarks) -> None:
        self.ctx = ctx
        self.inputs = inputs
        self.tailing = tailing
        self.marks = marks

    def ingest(self, src: IterationLogSource, *, iterations: list[int] | None = None) -> Outcome:
        """Read what changed in one source: all of it, or only what ``iterations`` need."""
        if why := self.ctx.roots.refused(src):
            return Outcome(errors=[why])
        report = Outcome()
        known_arts: dict[str, tuple] = {}
        if iterations is None:
            try:
                listing = list_log_dir(src)
            except OSError as exc:  # unreadable (EACCES, EIO…): change nothing, say so, retry later
                report.errors.append(f"{src.path}: cannot list the iteration-log directory: "
                                     f"{exc.strerror or exc}")
                return report
            self.ctx.listed_temps[src.id] = self.ctx.listed_sidecars[src.id] = listing
            if self.marks.begin(src, listing.mark):  # as the last quiet scan left it: no log file moved
                cands, known_arts = [], self._known(src, with_logs=False)[2]
            else:
                known, paths, known_arts = self._known(src)
                cands = S.changed_log_candidates(src, listing.logs, known)
                cands += S.log_candidates(src, [p for p in paths if p not in listing.logs])
            # records first, by iteration, then the other files: the event log's order does not
            # hang on the directory's, and a batch of records is projected together
            order = {kind: i for i, kind in enumerate(S.LOG_KINDS)}
            cands.sort(key=lambda c: (order[c.kind], c.n if c.n is not None else -1, c.rel))
            if cands:
                rels = [c.rel for c in cands] if len(cands) <= 500 else None  # None: every checkpoint, one query
                self._commit(src, self._observe(src, cands, rels, report), report)
        else:
            names = ["historical.yaml"]
            for n in iterations:
                names += [f"iter-{n}.yaml", f"iter-{n}.hook-outcomes.yaml", f"iter-{n}.labels.yaml"]
            cands = S.log_candidates(src, names)
            self._commit(src, self._observe(src, cands, [c.rel for c in cands], report), report)
            if any(self.inputs.effective_json(src, [n]) == {} for n in iterations):
                # The record may live in a file not named after it: look at the whole directory.
                return report.add(self.ingest(src))
        # Artifacts: what the records point at, and the plans' write scopes.
        # a full scan reads only what moved (the common case: nothing)
        full = iterations is None
        repo = self._prefetch_commits(src) if full else None
        try:
            cands = (S.artifact_candidates(src, self.artifact_refs(src, iterations), known_arts if full else None)
                     + (_moved(S.tasks_candidates(src), known_arts) if full else S.tasks_candidates(src)))
            if cands:
                rels = [c.rel for c in cands] if len(cands) <= 500 else None
                self._commit(src, self._observe(src, cands, rels, report), report)
            for directory in src.transcripts:
                report.add(self.tailing.transcripts(directory))
            for directory in src.vally_transcripts:
                if directory.is_dir():
                    report.add(self.tailing.vally(VallySource(directory)))
        finally:
            if repo is not None:
                repo.join_prefetch()
        return report

    def _prefetch_commits(self, src: IterationLogSource) -> GitRepo | None:
        """When a full scan changed many iterations (``PREFETCH_FROM``), their commits are
        resolved by git while the artifacts are read (``GitRepo.prefetch``): the planner
        that follows resolves them all (a cold ingest of 10,000: ~0.3 s it waited on git
        with a core idle). The repository, whose prefetch the caller joins; else None."""
        changed = [it for s, it in self.ctx.touched.iterations if s == src.id]
        if len(changed) < PREFETCH_FROM:
            return None
        refs = [r[0] for r in self.ctx.conn.execute(
            "SELECT commit_ref FROM iterations WHERE source = ? AND iteration IN (SELECT value FROM json_each(?))",
            (src.id, json.dumps(changed)))]
        repo = self.ctx.repo(src)
        repo.prefetch(refs)
        return repo

    def ingest_hint(self, src: IterationLogSource, names: set[str], repo_rels: set[str]) -> Outcome:
        """Re-read what a change notification named: files of the log directory
        (``names``) and repository files under ``.agents`` (``repo_rels``), plus the
        artifacts the touched records point at. Nothing else is stat'ed."""
        if why := self.ctx.roots.refused(src):
            return Outcome(errors=[why])
        report = Outcome()
        # Only what *this* hint changes: the accumulated set holds every iteration an
        # initial scan touched, and looking up all their artifacts cost a close ~200 ms
        # at 10,000 iterations.
        self.ctx.touched = Touched()
        cands = S.log_candidates(src, sorted(names))
        if cands:
            self._commit(src, self._observe(src, cands, [c.rel for c in cands], report), report)
        touched = sorted({it for s, it in self.ctx.touched.iterations if s == src.id})
        refs = self.artifact_refs(src, touched) if touched else []
        arts = S.artifact_candidates(src, refs)
        if repo_rels:
            known = {rel: kind for kind, rel in ((k, resolve_artifact_path(r)) for k, r in
                                                 self.artifact_refs(src, None)) if rel}
            arts += [S.in_repo(src, known[r], r) for r in repo_rels if r in known]
            if any(r.startswith(".agents/workflow/plans/") for r in repo_rels):
                arts += S.tasks_candidates(src)
        if arts:
            arts = list({c.rel: c for c in arts}.values())
            self._commit(src, self._observe(src, arts, [c.rel for c in arts], report), report)
        return report

    def artifact_refs(self, src: IterationLogSource, iterations: list[int] | None) -> list[tuple[str, str]]:
        """(kind, raw path) of every artifact the effective records point at: every verifier
        result first, then every review decision, each in iteration order and a record's own
        order, as one pass over the records gave them."""
        filt, args = "", [src.id]
        if iterations is not None:
            filt = " AND iteration IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(iterations))
        # kept with each iteration by the projection (store/iterations.py): no record decoded
        # here, each iteration's short list parsed by ``json`` (a ``json_each`` and two
        # ``json_extract`` a reference in SQL, ordered there, took 1.3 times the instructions)
        firsts, decisions = [], []
        for (refs,) in self.ctx.conn.execute(
                f"SELECT artifact_refs FROM iterations WHERE source = ? AND artifact_refs IS NOT NULL{filt}"
                " ORDER BY iteration", args):
            for kind, raw in json.loads(refs):
                if raw:
                    (decisions if kind == REVIEW_DECISION else firsts).append((kind, raw))
        return firsts + decisions

    def _known(self, src: IterationLogSource, *, with_logs: bool = True
               ) -> tuple[dict[str, tuple], list[str], dict[str, tuple]]:
        """The stat key of each log file last read whole and fine (one that could not be
        read is tried again: chmod changes no stat key), every checkpointed log file, and
        the stat keys of the artifacts likewise: one pass over the source's checkpoints
        (``with_logs=False``: only the artifacts')."""
        logs, paths, arts = {}, [], {}
        cur = self.ctx.conn.cursor()
        cur.row_factory = None  # plain tuples: 15,000 rows at 10,000 iterations
        # "read whole and fine" said by SQLite: no hash string made a row (36 -> 23 ms). Every
        # checkpoint is read in table order, not the (source, path) index's (a look-up in the
        # table a row); the artifacts' alone through their own index (``_ARTIFACT_SIDE``)
        sql = ("SELECT kind, path, dev, ino, size, mtime_ns, coalesce(content_hash, '') <> ''"
               " AND substr(content_hash, 1, 6) <> 'error:' FROM source_checkpoints")
        sql += " NOT INDEXED WHERE source = ?" if with_logs else f" WHERE source = ?{_ARTIFACT_SIDE}"
        for kind, path, dev, ino, size, mtime, ok in cur.execute(sql, (src.id,)):
            if kind in _LOG_KINDS:
                paths.append(path)
                if ok:
                    logs[path] = (dev, ino, size, mtime)
            elif ok and kind in _ARTIFACT_KINDS:
                arts[path] = (dev, ino, size, mtime)
        return logs, paths, arts

    # -- observe (in workers for bulk work), then commit here --------------------------------
    def _checkpoints(self, src: IterationLogSource, cands: list[S.Candidate], rels: list[str] | None
                     ) -> dict[str, dict]:
        """The checkpoints of ``rels``, or (None: many candidates) of every file on the
        candidates' side: log files (named in the log directory) or artifacts and plans
        (named in the repository), whose names never meet. A cold ingest's artifacts do not
        build a dict for each log file's checkpoint (~30 ms at 10,000 iterations, with
        the workers waiting for the pass's first jobs meanwhile)."""
        sql = "SELECT path, dev, ino, size, mtime_ns, content_hash, last_seq FROM source_checkpoints WHERE source = ?"
        args: list = [src.id]
        if rels is not None:
            if not rels:
                return {}
            sql += " AND path IN (%s)" % ",".join("?" * len(rels))
            args += rels
        elif len(sides := {c.kind in _LOG_KINDS for c in cands}) == 1:
            sql += _ON_SIDE % ("IN" if sides.pop() else "NOT IN")
            args.append(_LOG_KINDS_JSON)
        cur = self.ctx.conn.cursor()
        cur.row_factory = None
        return {path: {"stat": (dev, ino, size, mtime), "content_hash": digest, "last_seq": last}
                for path, dev, ino, size, mtime, digest, last in cur.execute(sql, args)}

    def _observe(self, src: IterationLogSource, cands: list[S.Candidate], rels: list[str] | None,
                 report: Outcome) -> Iterator[S.Observation]:
        """What reading each candidate found, as the workers find it: a cold ingest of
        100,000 files commits them a batch at a time instead of holding them all."""
        cps = self._checkpoints(src, cands, rels)
        jobs = [(src, cand, cps.get(cand.rel), self.ctx.limits) for cand in cands]
        moved = False
        for job, obs in zip(jobs, pmap(observe_job, jobs)):
            if obs is not None:
                if not moved:  # something moved: this scan keeps no mark of the directory
                    moved = True
                    self.marks.observed(src)
                obs.cand = job[1]  # (not sent back: its paths cost more to unpickle than the rest)
                report.files_read += obs.digest is not None and not obs.unchanged
                cp = cps.get(obs.cand.rel)
                obs.prev = cp["content_hash"] if cp is not None else None
                obs.after = cp["last_seq"] if cp is not None else None
                yield obs

    def _commit(self, src: IterationLogSource, observations: Iterable[S.Observation], report: Outcome) -> None:
        """Commit what was observed, ``BATCH`` files a transaction: their events appended
        together, each file's checkpoint with them (the checkpoint each observation was
        made against is the one it replaces: this process is the ledger's one writer)."""
        it = iter(observations)
        while chunk := list(itertools.islice(it, BATCH)):
            files, placing = [], []
            for obs in chunk:
                if obs.digest is None and obs.prev is None:
                    continue  # already known to be gone
                events = []
                if obs.digest != obs.prev:
                    occurred = (datetime.fromtimestamp(obs.stat[3] / 1e9, timezone.utc).isoformat()
                                if obs.stat and obs.stat[3] else None)
                    events = obs.events
                    for i, ev in enumerate(events):
                        ev.idempotency_key = f"{src.id}|{obs.cand.rel}|{obs.digest or 'removed'}|{obs.prev or '-'}|{i}"
                        ev.occurred_at = occurred
                    placing.append((f"{src.id}:{obs.cand.rel}", events, obs.prev is not None, obs.after))
                files.append((events, FileCheckpoint(src.id, obs.cand.rel, obs.cand.kind, obs.stat, obs.digest),
                              obs.cand.abs))
            commit.place(self.ctx.conn, placing)
            with commit.transaction(self.ctx) as batch:
                commit.record_files(batch, files, report)
            self.ctx.check_stop()


def _moved(cands: list[S.Candidate], known: dict[str, tuple]) -> list[S.Candidate]:
    """The candidates whose stat is not their checkpoint's (``known``; none, or a
    failed last read: absent): ``observe`` would return None for every other one, and
    checking here costs a stat each instead of a worker pool."""
    out = []
    for c in cands:
        key = known.get(c.rel)
        if key is not None:
            try:
                st = os.stat(c.abs)
                if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == key:
                    continue
            except OSError:
                pass
        out.append(c)
    return out
