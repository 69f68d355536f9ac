"""``Ledger``: the one object the CLI and the daemon hold. It wires the parts
together and runs the main job in one direction — source → events → projections
→ score → sidecar — and owns nothing else:

* ``IterationLogs``, ``Tailing``, ``Annotations`` turn what each source kind
  observed into events, projections and checkpoints, one transaction a batch;
* ``Planner`` says which iterations a change can affect;
* ``ScoringPass`` gathers their inputs (``Inputs``), scores them with the pure
  scorer and appends ``score.computed`` events;
* ``SidecarSync`` makes the files on disk equal the ledger;
* ``Rubrics`` activates a rubric and backfills under it.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from ..config import Config, IterationLogSource, VallySource
from ..process.parallel import shutdown as shutdown_workers
from ..scoring import rubric as rubric_data
from ..sources.iterlogs import files as S
from ..store import db as store
from ..store.touched import Touched
from . import rubrics
from .annotations import Annotations
from .context import Context
from .inputs import Inputs
from .iterlogs import IterationLogs
from .planner import Planner
from .outcome import Outcome, Progress, SourceError
from .regressions import Regressions
from .scan_marks import ScanMarks
from .scoring_pass import ScoringPass
from .sidecar_sync import SidecarSync
from .tailing import Tailing


class Ledger:
    def __init__(self, cfg: Config, conn: sqlite3.Connection | None = None, *, background_writes: bool = False):
        """``background_writes`` (the daemon): large scoring passes hand their sidecars
        to a writer thread (``SidecarSync``); otherwise a pass returns with them written."""
        conn = conn or store.connect(cfg.store.path, synchronous=cfg.store.synchronous)
        self.ctx = ctx = Context(cfg, conn, rubric=rubric_data.load(rubrics.target(cfg, conn)[0]),
                                 limits=S.ReadLimits(max_file_bytes=cfg.limits.max_file_bytes))
        self.inputs = Inputs(ctx)
        self.planner = Planner(ctx)
        self.tailing = Tailing(ctx)
        self.marks = ScanMarks(ctx)
        self.iterlogs = IterationLogs(ctx, self.inputs, self.tailing, self.marks)
        self.annotations = Annotations(ctx)
        self.sidecars = SidecarSync(ctx, background=background_writes)
        self.scoring = ScoringPass(ctx, self.inputs, self.sidecars)
        self.rubrics = rubrics.Rubrics(ctx, self.planner, self.scoring, self.sidecars)
        self.regressions = Regressions(ctx)

    # -- what callers read ------------------------------------------------------------------
    @property
    def cfg(self) -> Config:
        return self.ctx.cfg

    @property
    def conn(self) -> sqlite3.Connection:
        return self.ctx.conn

    @property
    def rubric(self) -> rubric_data.Rubric:
        return self.ctx.rubric

    @rubric.setter
    def rubric(self, value: rubric_data.Rubric) -> None:
        self.ctx.rubric = value

    @property
    def touched(self) -> Touched:
        return self.ctx.touched

    @touched.setter
    def touched(self, value: Touched) -> None:
        self.ctx.touched = value

    @property
    def announce(self) -> Callable[[str], None]:
        return self.ctx.announce

    @announce.setter
    def announce(self, fn: Callable[[str], None]) -> None:
        self.ctx.announce = fn

    def state(self, key: str) -> str | None:
        return self.ctx.state(key)

    def close(self) -> None:
        self.sidecars.close()
        for repo in self.ctx.repos.values():
            repo.close()
        shutdown_workers()
        store.optimize(self.ctx.conn)
        self.ctx.conn.close()

    # -- sources ------------------------------------------------------------------------------
    def register_sources(self) -> None:
        """Note the configured sources in the ledger (only when something changed)."""
        cfg, conn = self.ctx.cfg, self.ctx.conn
        known = {tuple(r) for r in conn.execute("SELECT source, kind, root, repo, trunk FROM sources")}
        rows = [(s.id, "iteration_log", str(s.path), str(s.repo), s.trunk) for s in cfg.iteration_logs]
        rows += [(s.id, "vally", str(s.path), None, None) for s in cfg.vally]
        rows += [(s.id, "annotations", str(s.path), None, None) for s in cfg.annotations]
        rows += [(str(d), "transcripts", str(d), None, None)
                 for d in dict.fromkeys(d for s in cfg.iteration_logs for d in s.transcripts)]
        todo = [r for r in rows if r not in known]
        if not todo:
            return
        now = datetime.now(timezone.utc).isoformat()
        with store.write_transaction(conn):
            conn.executemany(
                "INSERT OR REPLACE INTO sources (source, kind, root, repo, trunk, seen_at) VALUES (?,?,?,?,?,?)",
                [(*r, now) for r in todo])

    def ingest(self, src: IterationLogSource, *, iterations: list[int] | None = None) -> Outcome:
        return self.iterlogs.ingest(src, iterations=iterations)

    def ingest_hint(self, src: IterationLogSource, names: set[str], repo_rels: set[str]) -> Outcome:
        return self.iterlogs.ingest_hint(src, names, repo_rels)

    def ingest_vally(self, src: VallySource) -> Outcome:
        return self.tailing.vally(src)

    def ingest_transcripts(self, directory: Path) -> Outcome:
        return self.tailing.transcripts(directory)

    # -- change notifications: which source a path belongs to is the ledger's to know ----------
    def watch_paths(self) -> tuple[list[Path], list[Path]]:
        """The directories whose changes concern a configured source: those whose source
        reads only their own entries (iteration logs, transcript directories), and the trees
        read in depth (plans, artifacts, vally results, annotations). Which of them exist is
        the watcher's to check (``service/watching.py``), as it makes its watches."""
        cfg = self.ctx.cfg
        flat: list[Path] = []
        trees: list[Path] = []
        for src in cfg.iteration_logs:
            flat += [src.path, *src.transcripts]
            trees += [*src.vally_transcripts, src.repo / ".agents" / "workflow" / "plans",
                      src.repo / ".agents" / "active" / "verification"]
        trees += [v.path for v in cfg.vally]
        trees += [a.path for a in cfg.annotations]
        return list(dict.fromkeys(flat)), list(dict.fromkeys(trees))

    def ingest_paths(self, paths: Iterable[Path]) -> Outcome:
        """Read what a change notification named (a hint: nothing else is looked at)
        and rescore the iteration logs it concerned."""
        cfg, paths = self.ctx.cfg, list(paths)
        report = Outcome()
        touched_logs = []
        for src in cfg.iteration_logs:
            names = {p.name for p in paths if p.parent == src.path}
            repo_rels = {str(p.relative_to(src.repo)) for p in paths
                         if _under(p, src.repo / ".agents") and not _under(p, src.path)}
            transcripts = [d for d in src.transcripts if any(p.parent == d for p in paths)]
            trajectories = [d for d in src.vally_transcripts if any(_under(p, d) for p in paths)]
            if not (names or repo_rels or transcripts or trajectories):
                continue
            touched_logs.append(src)
            if names or repo_rels:
                report.add(self.iterlogs.ingest_hint(src, names, repo_rels))
            for d in transcripts:
                report.add(self.tailing.transcripts(d))
        if cfg.vally:
            from ..sources.vally.events import FILES  # the tailer's module: imported when there is vally to read
        for vsrc in cfg.vally:
            if any(_under(p, vsrc.path) and p.name in FILES for p in paths):
                report.add(self.tailing.vally(vsrc))
        for d in {d for s in cfg.iteration_logs for d in s.vally_transcripts}:
            if any(_under(p, d) for p in paths) and d not in {v.path for v in cfg.vally}:
                report.add(self.tailing.vally(VallySource(d)))
        for asrc in cfg.annotations:
            # whole files: a partial save is superseded by the event of the save that completes it
            rels = [str(p.relative_to(asrc.path)) for p in paths if _under(p, asrc.path) and p.suffix == ".md"]
            if rels:
                report.add(self.annotations.ingest(asrc, rels))
        for src in touched_logs:
            report.add(self.rescore(src, backstop=False))
        return report.add(self.detect())

    # -- scoring --------------------------------------------------------------------------------
    def score(self, src: IterationLogSource, iterations: list[int] | None = None, *,
              progress: Progress | None = None, finish: Callable[[], None] | None = None) -> Outcome:
        with self.ctx.repo(src).one_view():  # one trunk for the pass (and one git process for its check and tip)
            return self.scoring.score(src, iterations, progress=progress, finish=finish)

    def sync_sidecars(self, src: IterationLogSource, iterations: list[int] | None = None) -> Outcome:
        return self.sidecars.sync(src, iterations)

    def collect_writes(self) -> Outcome:
        return self.sidecars.collect_writes()

    def ensure_rubric(self, *, progress: Progress | None = None) -> Outcome | None:
        return self.rubrics.ensure(progress=progress)

    def backfill(self, *, progress: Progress | None = None) -> Outcome:
        return self.rubrics.backfill(progress=progress)

    def detect(self) -> Outcome:
        """Feed what is new in every score and trial stream to its change-point
        detector (``regressions.py``)."""
        return self.regressions.run()

    def wait_for_writes(self) -> None:
        """Until every sidecar handed to the writer thread so far has landed."""
        if self.sidecars.writer is not None:
            self.sidecars.writer.wait()

    # -- the main job, once ---------------------------------------------------------------------
    def scan_all(self, *, rescore_all: bool = False, progress: Progress | None = None) -> Outcome:
        """Ingest every source, activate the rubric the rule names (backfilling if it
        changed), rescore what the changes affect, and bring every sidecar in line.
        ``progress`` hears (done, total) of scoring, and (bytes, of bytes, what) of a
        large catch-up of a tailed file."""
        self.tailing.progress = progress
        try:
            return self._scan_all(rescore_all, progress).add(self.detect())
        finally:
            self.tailing.progress = None
            self.ctx.listed_sidecars.clear()  # this scan's listings: no later sync takes their stats
            store.optimize(self.ctx.conn)  # the daemon's queries from here on plan with statistics

    def _scan_all(self, rescore_all: bool, progress: Progress | None) -> Outcome:
        cfg = self.ctx.cfg
        total = Outcome()
        for repo in self.ctx.repos.values():
            repo.forget()
        self.planner.forget()
        self.sidecars.forget()  # at every start and reconcile of the daemon
        self.marks.forget()
        unreadable = set()
        ingested: dict[str, Outcome] = {}  # what each log's ingest did, for its mark (scan_marks.py)
        for src in cfg.iteration_logs:
            if not src.path.is_dir():
                total.errors.append(f"{src.path}: iteration-log directory does not exist")
                continue
            report = ingested[src.id] = self.iterlogs.ingest(src)
            if report.errors and not os.access(src.path, os.R_OK | os.X_OK):
                unreadable.add(src.id)  # nothing to score or write there until it can be read
            total.add(report)
        for vsrc in cfg.vally:
            total.add(self.tailing.vally(vsrc))
        for asrc in cfg.annotations:
            total.add(self.annotations.ingest(asrc))
        backfill = self.rubrics.ensure(progress=progress)
        if backfill:
            total.add(backfill)
        if backfill is not None and not rescore_all:
            return total  # the backfill scored and synced every source, and consumed the queue
        for src in cfg.iteration_logs:
            if src.path.is_dir() and src.id not in unreadable:
                report = self.rescore(src, everything=rescore_all, progress=progress, sync_all=True)
                total.add(report)
                self.marks.finish(src, report.add(ingested[src.id]))
        return total

    def rescore(self, src: IterationLogSource, *, everything: bool = False, backstop: bool = True,
                progress: Progress | None = None, sync_all: bool = False) -> Outcome:
        """Score what changed (or every iteration) under the ledger's active rubric;
        errors are reported, never raised. ``backstop``: see ``Planner.affected``.
        ``sync_all``: then bring every sidecar of the source in line (a full pass does)."""
        if why := self.ctx.roots.refused(src):
            return Outcome(errors=[why])
        self.rubrics.follow()
        try:
            with self.ctx.repo(src).one_view():
                finish = functools.partial(self.planner.record_trunk_rows, src)
                # a pass of many batches feeds the detectors as they commit, not all at the end
                # (at 10,000 they no longer leave a core idle for ~0.6 s after the scoring)
                if everything:
                    return self.scoring.score(src, finish=finish, progress=progress, between=self.detect)
                # a source as the last quiet scan left it, nothing committed since, has no iteration
                # without a score (that scan found none): the backstop's query over every one is spared
                backstop = backstop and not self.marks.in_line(src)
                todo = sorted(set(self.planner.affected(src, backstop=backstop)) | set(self.scoring.unverified(src)))
                if todo:
                    return self.scoring.score(src, todo, finish=finish, progress=progress, between=self.detect,
                                              sync_all=sync_all)
                self.planner.record_trunk(src)
                report = Outcome()
        except SourceError as exc:
            report = Outcome(errors=[str(exc)])
        if not sync_all or self.marks.in_line(src):  # (in line: as the last quiet scan left them)
            return report
        return report.add(self.sidecars.sync(src))


def _under(p: Path, root: Path) -> bool:
    return p == root or root in p.parents
