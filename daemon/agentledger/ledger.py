"""The ledger's main job, one direction: source → events → projections → score → sidecar.

``Ledger`` ties the pieces together for the CLI (and later the daemon):

* ``ingest`` asks a source what changed and commits the proposed events, the
  projections they imply and the source checkpoints in one transaction per
  batch, so a crash leaves either all of a batch or none of it;
* ``score`` gathers each iteration's inputs from projections plus batched git
  facts, scores them with the pure scorer, and appends a ``score.computed``
  event only when the inputs hash changed;
* ``sync_sidecars`` renders sidecars from the ledger (never from a live score)
  and writes those whose bytes on disk differ;
* ``ensure_rubric`` records a rubric activation and runs (or resumes) the
  backfill that rescores every iteration under it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import itertools
import json
import logging
import os
import sqlite3
import stat
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import sidecars
from .config import AnnotationSource, Config, IterationLogSource, VallySource
from .git import GitRepo
from .model import Artifact, HookOutcomes, Labels, Record, encode_float, from_jsonable
from .parallel import pmap
from .parallel import shutdown as shutdown_workers
from .scoring import rubric as rubrics
from .scoring.combine import Score, score
from .scoring.inputs import ScoringInputs, TranscriptTotals
from .sources import iterlog as S
from .sources.artifacts_parse import REVIEW_DECISION, TASKS, VERIFIER_RESULT, resolve_artifact_path
from .store import db as store
from .store.events import Event, append, append_many, canonical_json, content_hash, upcast
from .store.projections import PreparedTrials, Projector, Touched, render_score_payload, session_document
from .windows import FactSums, window_successors, windows_meeting

log = logging.getLogger("agentledger")
BATCH = 1000
AUTO_FSYNC_MAX = 20  # writes of up to this many sidecars are fsynced under fsync = "auto"
Progress = Callable[[int, int], None]


class SourceError(RuntimeError):
    """A source that cannot be scored right now (e.g. its repo is not a git work tree)."""


@dataclass
class Report:
    events: int = 0
    quarantined: int = 0
    files_read: int = 0
    scored: int = 0
    unchanged: int = 0
    sidecars_written: int = 0
    sessions_written: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: Report) -> Report:
        for k in ("events", "quarantined", "files_read", "scored", "unchanged",
                  "sidecars_written", "sessions_written"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.errors += other.errors
        return self


def _chunks(items: list, size: int = BATCH) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class Ledger:
    def __init__(self, cfg: Config, conn: sqlite3.Connection | None = None, *, background_writes: bool = False):
        """``background_writes`` (the daemon): a scoring pass of more than
        ``AUTO_FSYNC_MAX`` sidecars hands them to a writer thread and returns
        after its commit, so the next change is read while they land; their
        counts and errors come with ``collect_writes``. Otherwise a pass
        returns with its sidecars written."""
        self.cfg = cfg
        self.conn = conn or store.connect(cfg.store.path, synchronous=cfg.store.synchronous)
        self.announce: Callable[[str], None] = log.info  # the CLI prints it on stderr
        self.rubric = rubrics.load(self.rubric_target()[0])
        self.limits = S.ReadLimits(max_file_bytes=cfg.limits.max_file_bytes)
        self._repos: dict[str, GitRepo] = {}
        self.touched = Touched()  # what ingestion changed (since the last change notification)
        self._ends: dict[str, dict[int, int | None]] = {}  # source -> iteration -> commit time (ns)
        self._sums: dict[tuple[str, ...], FactSums] = {}  # transcript directories -> window sums
        self._check_conn: sqlite3.Connection | None = None  # the writer thread's view of the ledger
        self._writer = sidecars.BackgroundWriter(self._still_current) if background_writes else None
        self._swept: set[str] = set()  # sidecar directories cleared of killed writers' temp files

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            for err in self._writer.take()[1]:  # no report left to carry them
                log.error(err)
            if self._check_conn is not None:
                self._check_conn.close()
        for repo in self._repos.values():
            repo.close()
        shutdown_workers()
        self.conn.close()

    # ------------------------------------------------------------------ sources
    def register_sources(self) -> None:
        """Note the configured sources in the ledger (only when something changed)."""
        known = {tuple(r) for r in self.conn.execute("SELECT source, kind, root, repo, trunk FROM sources")}
        rows = [(s.id, "iteration_log", str(s.path), str(s.repo), s.trunk) for s in self.cfg.iteration_logs]
        rows += [(s.id, "vally", str(s.path), None, None) for s in self.cfg.vally]
        rows += [(s.id, "annotations", str(s.path), None, None) for s in self.cfg.annotations]
        rows += [(str(d), "transcripts", str(d), None, None)
                 for d in dict.fromkeys(d for s in self.cfg.iteration_logs for d in s.transcripts)]
        todo = [r for r in rows if r not in known]
        if not todo:
            return
        now = datetime.now(timezone.utc).isoformat()
        with store.write_transaction(self.conn):
            self.conn.executemany(
                "INSERT OR REPLACE INTO sources (source, kind, root, repo, trunk, seen_at) VALUES (?,?,?,?,?,?)",
                [(*r, now) for r in todo])

    def repo(self, src: IterationLogSource) -> GitRepo:
        repo = self._repos.get(src.id)
        if repo is None:
            repo = self._repos[src.id] = GitRepo(str(src.repo), src.trunk)
        return repo

    # ------------------------------------------------------------------ ingest
    def _checkpoints(self, src: IterationLogSource, rels: list[str] | None) -> dict[str, dict]:
        sql = "SELECT path, dev, ino, size, mtime_ns, content_hash FROM source_checkpoints WHERE source = ?"
        args: list = [src.id]
        if rels is not None:
            if not rels:
                return {}
            sql += " AND path IN (%s)" % ",".join("?" * len(rels))
            args += rels
        return {r["path"]: {"stat": (r["dev"], r["ino"], r["size"], r["mtime_ns"]),
                            "content_hash": r["content_hash"]}
                for r in self.conn.execute(sql, args)}

    def _observe(self, src: IterationLogSource, cands: list[S.Candidate], rels: list[str] | None,
                 report: Report) -> list[S.Observation]:
        cps = self._checkpoints(src, rels)
        jobs = [(src, cand, cps.get(cand.rel), self.limits) for cand in cands]
        out = []
        for obs in pmap(_observe_job, jobs):
            if obs is not None:
                out.append(obs)
                report.files_read += obs.digest is not None and not obs.unchanged
        return out

    def _commit(self, src: IterationLogSource, observations: list[S.Observation], report: Report) -> None:
        for chunk in _chunks(observations):
            with store.write_transaction(self.conn):
                projector = Projector(self.conn)
                for obs in chunk:
                    self._commit_one(src, obs, projector, report)
                projector.flush()
            self.touched.merge(projector.queued)

    def _record(self, events: list[Event], projector: Projector, report: Report, where: object) -> int | None:
        """Append ``events`` (inside the caller's transaction), project the new ones,
        count and log them; the ``seq`` of the last new event, if any."""
        last = None
        for ev in append_many(self.conn, events):
            projector.apply(ev)
            last = ev.seq
            report.events += 1
            if ev.type == "source.quarantined":
                report.quarantined += 1
                log.warning("quarantined %s: %s", where, ev.payload["reason"])
        return last

    def _commit_one(self, src: IterationLogSource, obs: S.Observation, projector: Projector,
                    report: Report) -> None:
        row = self.conn.execute("SELECT content_hash FROM source_checkpoints WHERE source = ? AND path = ?",
                                (src.id, obs.cand.rel)).fetchone()
        prev = row[0] if row else None
        if obs.digest is None and prev is None:
            return  # already known to be gone
        last_seq = None
        if obs.digest != prev:
            occurred = (datetime.fromtimestamp(obs.stat[3] / 1e9, timezone.utc).isoformat()
                        if obs.stat and obs.stat[3] else None)
            for i, ev in enumerate(obs.events):
                ev.idempotency_key = f"{src.id}|{obs.cand.rel}|{obs.digest or 'removed'}|{prev or '-'}|{i}"
                ev.occurred_at = occurred
            last_seq = self._record(obs.events, projector, report, obs.cand.abs)
        if obs.digest is None:
            self.conn.execute("DELETE FROM source_checkpoints WHERE source = ? AND path = ?",
                              (src.id, obs.cand.rel))
            return
        self._save_file_checkpoint(src.id, obs.cand.rel, obs.cand.kind, obs.stat, obs.digest, last_seq)

    def _save_file_checkpoint(self, source: str, rel: str, kind: str, stat_: tuple | None,
                              content_hash: str | None, last_seq: int | None) -> None:
        """What a whole-file source last saw of ``rel`` (inside the caller's transaction)."""
        dev, ino, size, mtime = stat_ or (None, None, None, None)
        self.conn.execute(
            "INSERT INTO source_checkpoints (source, path, kind, dev, ino, size, mtime_ns, content_hash, last_seq)"
            " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (source, path) DO UPDATE SET kind = excluded.kind,"
            " dev = excluded.dev, ino = excluded.ino, size = excluded.size, mtime_ns = excluded.mtime_ns,"
            " content_hash = excluded.content_hash, last_seq = coalesce(excluded.last_seq, last_seq)",
            (source, rel, kind, dev, ino, size, mtime, content_hash, last_seq))

    def ingest(self, src: IterationLogSource, *, iterations: list[int] | None = None) -> Report:
        """Read what changed in one source: all of it, or only what ``iterations`` need."""
        report = Report()
        if iterations is None:
            try:
                cands = S.log_candidates(src)
            except OSError as exc:  # unreadable (EACCES, EIO…): change nothing, say so, retry later
                report.errors.append(f"{src.path}: cannot list the iteration-log directory: "
                                     f"{exc.strerror or exc}")
                return report
            seen = {c.rel for c in cands}
            gone = [r[0] for r in self.conn.execute(
                "SELECT path FROM source_checkpoints WHERE source = ? AND kind IN (?,?,?,?)",
                (src.id, *S.LOG_KINDS)) if r[0] not in seen]
            cands += S.log_candidates(src, gone)
            self._commit(src, self._observe(src, cands, None, report), report)
        else:
            names = ["historical.yaml"]
            for n in iterations:
                names += [f"iter-{n}.yaml", f"iter-{n}.hook-outcomes.yaml", f"iter-{n}.labels.yaml"]
            cands = S.log_candidates(src, names)
            self._commit(src, self._observe(src, cands, [c.rel for c in cands], report), report)
            if any(self._effective(src, [n]) == {} for n in iterations):
                # The record may live in a file not named after it: look at the whole directory.
                return report.add(self.ingest(src))
        # Artifacts: what the records point at, and the plans' write scopes.
        cands = S.artifact_candidates(src, self._artifact_refs(src, iterations)) + S.tasks_candidates(src)
        rels = None if iterations is None else [c.rel for c in cands]
        self._commit(src, self._observe(src, cands, rels, report), report)
        for directory in src.transcripts:
            report.add(self.ingest_transcripts(directory))
        for directory in src.vally_transcripts:
            if directory.is_dir():
                report.add(self.ingest_vally(VallySource(directory)))
        return report

    def ingest_hint(self, src: IterationLogSource, names: set[str], repo_rels: set[str]) -> Report:
        """Re-read what a change notification named: files of the log directory
        (``names``) and repository files under ``.agents`` (``repo_rels``), plus the
        artifacts the touched records point at. Nothing else is stat'ed."""
        report = Report()
        # Only what *this* hint changes: the accumulated set holds every iteration an
        # initial scan touched, and looking up all their artifacts cost a close ~200 ms
        # at 10,000 iterations.
        self.touched = Touched()
        cands = S.log_candidates(src, sorted(names))
        if cands:
            self._commit(src, self._observe(src, cands, [c.rel for c in cands], report), report)
        touched = sorted({it for s, it in self.touched.iterations if s == src.id})
        refs = self._artifact_refs(src, touched) if touched else []
        arts = S.artifact_candidates(src, refs)
        if repo_rels:
            known = {rel: kind for kind, rel in ((k, resolve_artifact_path(r)) for k, r in
                                                 self._artifact_refs(src, None)) if rel}
            arts += [S.Candidate(known[r], r, src.repo / r) for r in repo_rels if r in known]
            if any(r.startswith(".agents/workflow/plans/") for r in repo_rels):
                arts += S.tasks_candidates(src)
        if arts:
            arts = list({c.rel: c for c in arts}.values())
            self._commit(src, self._observe(src, arts, [c.rel for c in arts], report), report)
        return report

    def _artifact_refs(self, src: IterationLogSource, iterations: list[int] | None) -> list[tuple[str, str]]:
        """(kind, raw path) of every artifact the effective records point at."""
        filt, args = "", [src.id]
        if iterations is not None:
            filt = " AND i.iteration IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(iterations))
        sql = (f"SELECT '{VERIFIER_RESULT}', json_extract(v.value, '$.result_artifact') FROM iteration_records i,"
               f" json_each(i.record, '$.verifiers') v WHERE i.source = ?{filt}"
               f" UNION ALL SELECT '{REVIEW_DECISION}', json_extract(i.record, '$.review.decision_artifact')"
               f" FROM iteration_records i WHERE i.source = ?{filt}")
        return [(r[0], r[1]) for r in self.conn.execute(sql, args + args) if r[1]]

    # ------------------------------------------------------------------ everything, once
    def scan_all(self, *, rescore_all: bool = False, progress: Progress | None = None) -> Report:
        """Ingest every source, activate the configured rubric (backfilling if it
        changed), rescore what the changes affect, and bring every sidecar in line."""
        total = Report()
        for repo in self._repos.values():
            repo.forget()
        self._ends.clear()
        self._swept.clear()  # at every start and reconcile of the daemon
        unreadable = set()
        for src in self.cfg.iteration_logs:
            if not src.path.is_dir():
                total.errors.append(f"{src.path}: iteration-log directory does not exist")
                continue
            report = self.ingest(src)
            if report.errors and not os.access(src.path, os.R_OK | os.X_OK):
                unreadable.add(src.id)  # nothing to score or write there until it can be read
            total.add(report)
        for vsrc in self.cfg.vally:
            total.add(self.ingest_vally(vsrc))
        for asrc in self.cfg.annotations:
            total.add(self.ingest_annotations(asrc))
        backfill = self.ensure_rubric(progress=progress)
        if backfill:
            total.add(backfill)
        for src in self.cfg.iteration_logs:
            if src.path.is_dir() and src.id not in unreadable:
                everything = rescore_all or backfill is not None
                total.add(self.rescore(src, everything=everything))
                if not everything:  # a full pass ends by syncing every sidecar itself
                    total.add(self.sync_sidecars(src))
        return total

    def rescore(self, src: IterationLogSource, *, everything: bool = False) -> Report:
        """Score what changed (or every iteration); errors are reported, never raised."""
        try:
            with self.repo(src).one_view():
                finish = functools.partial(self._record_trunk_rows, src)
                if everything:
                    return self.score(src, finish=finish)
                todo = self.affected(src)
                if todo:
                    return self.score(src, todo, finish=finish)
                self.record_trunk(src)
                return Report()
        except SourceError as exc:
            return Report(errors=[str(exc)])

    # ------------------------------------------------------------------ annotated trajectories
    def ingest_annotations(self, src: AnnotationSource, rels: Iterable[str] | None = None) -> Report:
        """Read the annotation files of ``src`` that changed: all of them (a scan, which
        also notices removals), or just ``rels`` (a change notification's hint).

        A file is re-read only when its stat moved and recorded only when its bytes
        did; files are committed in batches of 200, each with its checkpoints."""
        from .sources import annotations as A

        report = Report()
        if not src.path.is_dir():
            report.errors.append(f"{src.path}: annotations directory does not exist")
            return report
        self._seed_vocabulary()
        known = {r[0]: r[1:] for r in self.conn.execute(
            "SELECT path, dev, ino, size, mtime_ns, content_hash FROM source_checkpoints WHERE source = ?"
            " AND kind = ?", (src.id, A.KIND))}
        full = rels is None
        try:
            todo = A.discover(src.path) if full else sorted(set(rels or ()))
        except OSError as exc:
            report.errors.append(f"{src.path}: {exc.strerror or exc}")
            return report
        if full:
            todo += sorted(set(known) - set(todo))  # gone since the last scan
        limit = self.cfg.limits.max_file_bytes
        for start in range(0, len(todo), 200):
            changes = []  # (rel, stat | None, sha | None, events)
            for rel in todo[start:start + 200]:
                path = src.path / rel
                prev = known.get(rel)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    if prev is not None:
                        changes.append((rel, None, None, [A.removed(src.id, rel, prev[4])]))
                    continue
                except OSError as exc:
                    report.errors.append(f"{path}: {exc.strerror or exc}")
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue  # symlinks, directories named *.md, fifos: not annotation files
                sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if prev is not None and tuple(prev[:4]) == sig:
                    continue
                if st.st_size > limit:
                    sha = f"size:{st.st_size}"
                    events = [] if prev and prev[4] == sha else [A.quarantine(
                        src.id, rel, None, f"{st.st_size} bytes, over the max_file_bytes limit ({limit})", None,
                        f"annotation|{src.id}|{rel}|{sha}|{prev[4] if prev else '-'}")]
                    changes.append((rel, sig, sha, events))
                    continue
                try:
                    with open(path, "rb") as fh:
                        data = fh.read(limit + 1)
                except OSError as exc:
                    report.errors.append(f"{path}: {exc.strerror or exc}")
                    continue
                sha = hashlib.sha256(data).hexdigest()
                same = prev is not None and prev[4] == sha
                changes.append((rel, sig, sha, [] if same else A.events_for(src.id, rel, data, prev[4] if prev else None,
                                                                             sha)))
            if not changes:
                continue
            with store.write_transaction(self.conn):
                projector = Projector(self.conn)
                for rel, sig, sha, events in changes:
                    last = self._record(events, projector, report, src.path / rel)
                    if sig is None:
                        self.conn.execute("DELETE FROM source_checkpoints WHERE source = ? AND path = ?",
                                          (src.id, rel))
                        continue
                    self._save_file_checkpoint(src.id, rel, A.KIND, sig, sha, last)
                projector.flush()
            report.files_read += len(changes)
        return report

    def _seed_vocabulary(self) -> None:
        """The format's seed terms (``schema/annotations/vocabulary.toml``), once per process."""
        if getattr(self, "_seeded", False):
            return
        from .paths import schema_dir
        from .sources.annotations import seeds

        rows = seeds(schema_dir())
        have = {tuple(r) for r in self.conn.execute("SELECT vocabulary, term, category FROM vocabulary_seeds")}
        if set(rows) != have:
            with store.write_transaction(self.conn):
                self.conn.execute("DELETE FROM vocabulary_seeds")
                self.conn.executemany("INSERT INTO vocabulary_seeds (vocabulary, term, category) VALUES (?,?,?)",
                                      rows)
        self._seeded = True

    # ------------------------------------------------------------------ tailed JSONL (vally)
    def ingest_vally(self, src: VallySource) -> Report:
        """Tail every results/run-summary file under ``src`` from its stored position."""
        from .sources import vally

        if not src.path.is_dir():
            return Report(errors=[f"{src.path}: vally directory does not exist"])
        wanted = {d for s in self.cfg.iteration_logs for d in s.vally_transcripts}
        if src.path in wanted:
            return self._ingest_tailed(src.id, src.path, vally.discover(src.path),
                                       vally.events_for_with_trajectories, mode="jsonl+turns")
        return self._ingest_tailed(src.id, src.path, vally.discover(src.path), vally.events_for)

    def ingest_transcripts(self, directory: Path) -> Report:
        """Tail the ``*.jsonl`` transcripts directly in ``directory`` (a missing one is skipped)."""
        from .sources import transcripts

        if not directory.is_dir():
            return Report()
        return self._ingest_tailed(str(directory), directory, transcripts.discover(directory),
                                   transcripts.events_for, complete=transcripts.complete_line)

    def _ingest_tailed(self, source: str, root: Path, rels: list[str], events_for, mode: str = "jsonl",
                       complete: Callable[[bytes], bool] | None = None) -> Report:
        """Tail ``rels`` under ``root``. ``mode`` is recorded with each file's position:
        a file last read in another mode (e.g. before its trajectories were opted in)
        is read again from the start; idempotency keys keep the old events unique.
        ``complete``: which unterminated last lines count already (``jsonl.tail``)."""
        from .sources import jsonl

        report = Report()
        src_id = source
        for rel in rels:
            row = self.conn.execute(
                "SELECT byte_offset, line_no, fingerprint, kind, open_line FROM source_checkpoints"
                " WHERE source = ? AND path = ?", (src_id, rel)).fetchone()
            if row is not None and row[3] != mode:
                row = None
            previous = ({"offset": row[0], "line_no": row[1], "fingerprint": row[2]} if row else None)
            pos = jsonl.Position(row[0], row[1], row[2], row[4]) if row else jsonl.Position()
            try:
                moved = None if pos.open else self._tail_in_parallel(src_id, root / rel, rel, pos, events_for,
                                                                     report, mode)
                if moved is not None:
                    pos, previous = moved, None
                batches = jsonl.tail(root / rel, pos, max_line_bytes=self.cfg.limits.max_line_bytes,
                                     max_batch_bytes=16 << 20, max_lines=5000, complete=complete)
                for batch in batches:
                    self._commit_jsonl(src_id, rel, batch, events_for(src_id, rel, batch, previous), report, mode)
                    previous = None  # a reset is reported once, on the batch that restarted
            except OSError as exc:  # vanished or unreadable: keep its history, say so
                report.errors.append(f"{root / rel}: {exc.strerror or exc}")
        return report

    def _tail_in_parallel(self, source: str, path: Path, rel: str, pos, events_for, report: Report,
                          mode: str):
        """A large backlog (a results file copied in whole, a first ingest) is parsed by
        the worker processes in line-aligned 16 MB chunks while this process commits
        them in order, one transaction per chunk with its position: the same events
        and the same exactly-once checkpoints as the sequential reader, on every core.

        Workers number lines within their chunk; a chunk whose events name a line
        (a quarantined one) is parsed again here with the true line numbers, which
        only this process knows. Returns the position after the last commit (None
        when nothing was done this way); the sequential reader takes the rest (the
        partial last line, a reset, an over-long line)."""
        from .sources import jsonl

        try:
            if os.stat(path).st_size - pos.offset < parallel_tail_min_bytes():
                return None  # the usual case (a few new lines): no pool, no imports
        except OSError:
            return None  # the sequential reader reports it
        from . import parallel

        if parallel.executor() is None:
            return None
        chunks = jsonl.plan(path, pos, min_bytes=parallel_tail_min_bytes(), block=parallel_tail_block())
        first = next(chunks, None)
        if first is None:
            return None
        st = os.stat(path)
        stat_ = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        limit = self.cfg.limits.max_line_bytes
        jobs = ((events_for, source, rel, str(path), chunk, limit) for chunk in itertools.chain([first], chunks))
        moved, line_no = None, pos.line_no

        def commit(result) -> None:
            nonlocal moved, line_no
            chunk, n_lines, events = result
            if events is None:  # they name line numbers: parse again here, where those are known
                lines = jsonl.chunk_lines(path, chunk, max_line_bytes=limit, line_base=line_no)
                events = events_for(source, rel, jsonl.Batch(items=lines), None)
            line_no += n_lines
            moved = jsonl.Position(chunk.end, line_no, jsonl.fingerprint(fh, chunk.end))
            self._commit_jsonl(source, rel, jsonl.Batch(end=moved, size=st.st_size, stat=stat_), events,
                               report, mode)

        with _no_cyclic_gc(), open(path, "rb") as fh, store.bulk_commits(self.conn) as last_commit_follows:
            held = None  # each result is committed once the next one is in: the last is known
            for result in parallel.imap_bounded(_tail_chunk_job, jobs):
                if held is not None:
                    commit(held)
                held = result
            last_commit_follows()
            commit(held)
        return moved

    def _commit_jsonl(self, source: str, rel: str, batch, events: list[Event] | PreparedTrials, report: Report,
                      mode: str = "jsonl") -> None:
        """The events of one batch (or a worker's prepared form of them) and the position
        after it: one transaction (exactly once)."""
        if not events and batch.end.offset == 0 and batch.reset is None and batch.reopened is None:
            return
        with store.write_transaction(self.conn):
            projector = Projector(self.conn)
            if isinstance(events, PreparedTrials):
                n, last = events.record(self.conn, projector)
                report.events += n
            else:
                projector.prefetch_trials(events)
                last = self._record(events, projector, report, rel)
            projector.flush()
            dev, ino, size, mtime = batch.stat or (None, None, None, None)
            self.conn.execute(
                "INSERT INTO source_checkpoints (source, path, kind, dev, ino, size, mtime_ns, byte_offset,"
                " line_no, fingerprint, open_line, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (source, path) DO UPDATE SET kind = excluded.kind, dev = excluded.dev, ino = excluded.ino,"
                " size = excluded.size, mtime_ns = excluded.mtime_ns, byte_offset = excluded.byte_offset,"
                " line_no = excluded.line_no, fingerprint = excluded.fingerprint, open_line = excluded.open_line,"
                " last_seq = coalesce(excluded.last_seq, last_seq)",
                (source, rel, mode, dev, ino, size, mtime, batch.end.offset, batch.end.line_no,
                 batch.end.fingerprint, batch.end.open, last))
        self.touched.merge(projector.queued)
        report.files_read += 1

    # ------------------------------------------------------------------ scoring
    def _effective_json(self, src: IterationLogSource, iterations: list[int] | None) -> dict[int, str]:
        """The effective record JSON of each iteration (all, or ``iterations``)."""
        sql = "SELECT iteration, record FROM iteration_records WHERE source = ?"
        args: list = [src.id]
        if iterations is not None:
            sql += " AND iteration IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(list(iterations)))
        return {r[0]: r[1] for r in self.conn.execute(sql + " ORDER BY iteration", args)}

    def _effective(self, src: IterationLogSource, iterations: list[int] | None) -> dict[int, Record]:
        return {it: Record.from_json(json.loads(text)) for it, text in self._effective_json(src, iterations).items()}

    def _side(self, table: str, src: IterationLogSource, iterations: Iterable[int], cls: type) -> dict[int, object]:
        its = list(iterations)
        if not its:
            return {}
        rows = self.conn.execute(
            f"SELECT iteration, outcome FROM {table} WHERE source = ? AND iteration IN (%s)" % ",".join("?" * len(its)),
            [src.id, *its])
        return {r[0]: from_jsonable(cls, json.loads(r[1])) for r in rows}

    def _artifacts(self, src: IterationLogSource, paths: set[str] | None) -> tuple[dict[str, Artifact], list[Artifact]]:
        """Artifacts at ``paths`` (all when None) and every plan's TASKS.yaml, in path order."""
        sql = "SELECT path, artifact FROM artifacts WHERE source = ? AND (kind = ?"
        args: list = [src.id, TASKS]
        if paths is None:
            sql += " OR 1)"
        else:
            sql += " OR path IN (SELECT value FROM json_each(?)))"
            args.append(json.dumps(sorted(paths)))
        arts: dict[str, Artifact] = {}
        tasks: list[Artifact] = []
        for r in self.conn.execute(sql + " ORDER BY path", args):
            a = from_jsonable(Artifact, json.loads(r[1]))
            arts[r[0]] = a
            if a.kind == TASKS:
                tasks.append(a)
        return arts, tasks

    def gather(self, src: IterationLogSource, iterations: list[int] | None = None) -> list[tuple[ScoringInputs, str]]:
        """Scoring inputs of each iteration, with its record's stored JSON (for the inputs hash)."""
        texts = self._effective_json(src, iterations)
        if not texts:
            return []
        records = {it: Record.from_json(json.loads(t)) for it, t in texts.items()}
        repo = self.repo(src)
        problem = repo.check()
        if problem:
            raise SourceError(f"cannot score {src.label}: {problem}")
        hooks = self._side("hook_outcomes", src, records, HookOutcomes)
        labels = self._side("labels", src, records, Labels)
        wanted = None
        if iterations is not None:
            wanted = {p for rec in records.values()
                      for p in [resolve_artifact_path(v.result_artifact) for v in rec.verifiers]
                      + [resolve_artifact_path(rec.review.decision_artifact)] if p}
        arts, tasks = self._artifacts(src, wanted)
        batch = len(records) > 8
        resolutions = repo.resolve([r.commit for r in records.values()])

        def artifact(raw: str, kind: str) -> Artifact | None:
            rel = resolve_artifact_path(raw)
            a = arts.get(rel) if rel else None
            return a if a is not None and a.kind == kind else None

        def write_scope(task_id: str) -> tuple[str, ...] | None:
            if not task_id.strip():
                return None
            for t in tasks:
                for tid, scope in t.tasks:
                    if tid == task_id and scope:
                        return tuple(scope)
            return None

        trunk = repo.trunk_log()
        windows = self._windows(src, repo, records, resolutions, partial_log=iterations is not None)
        sums = self._fact_sums(src)
        partial = []
        for it, rec in records.items():
            res = resolutions[rec.commit]
            landed = repo.landed(rec.commit, rec.impl.summary, res, trunk, batch=batch)
            partial.append((it, rec, res, landed, write_scope(rec.task_id) if landed.resolved else None))
        changed = repo.changed_files([p[3].resolved for p in partial if p[4] is not None])
        out = []
        for it, rec, res, landed, scope in partial:
            out.append((ScoringInputs(
                record=rec, trunk=src.trunk, hook=hooks.get(it), labels=labels.get(it),
                verifier_artifacts=tuple(artifact(v.result_artifact, VERIFIER_RESULT) for v in rec.verifiers),
                review_artifact=artifact(rec.review.decision_artifact, REVIEW_DECISION),
                landed=landed, write_scope=scope,
                changed_files=changed.get(landed.resolved) if scope is not None else None,
                commit_time=res.commit_time,
                transcript=(TranscriptTotals(*sums.total(*windows[it])) if sums else TranscriptTotals())
                if it in windows else None,
            ), texts[it]))
        return out

    # -- which iterations can a change affect? ------------------------------------------------
    def affected(self, src: IterationLogSource) -> list[int]:
        """The iterations whose score inputs may have changed since the last pass.

        From what ingestion touched: changed records (and the next iteration whose
        commit resolves: its window starts at theirs), hook/labels files, records
        pointing at a changed artifact (any iteration with a task id when a plan's
        TASKS.yaml changed), transcript lines (the windows they fall in), and the
        trunk (commits that became reachable, reverts and subjects in old..new, or
        everything if history was rewritten); plus iterations with no score under
        the active rubric. A full pass (``score(src)``) stays the backstop."""
        dirs = [str(d) for d in (*src.transcripts, *src.vally_transcripts)]
        queued = self.conn.execute(
            "SELECT id, source, kind, key, lo, hi FROM pending WHERE source = ? OR source IN"
            " (SELECT value FROM json_each(?))", (src.id, json.dumps(dirs))).fetchall()
        self._consumed = (src.id, [r[0] for r in queued])
        out = {int(r[3]) for r in queued if r[2] == "iteration" and r[1] == src.id}
        out |= {r[0] for r in self.conn.execute(
            "SELECT iteration FROM iterations WHERE source = ? AND iteration NOT IN"
            " (SELECT iteration FROM scores WHERE source = ? AND rubric_version = ?)",
            (src.id, src.id, self.rubric.version))}
        paths = {r[3] for r in queued if r[2] == "artifact" and r[1] == src.id}
        if paths:
            if any(p.startswith(".agents/workflow/plans/") for p in paths):
                out |= {r[0] for r in self.conn.execute(
                    "SELECT iteration FROM iterations WHERE source = ? AND trim(task_id) <> ''", (src.id,))}
            for it, _kind, raw in self._artifact_refs_by_iteration(src):
                if resolve_artifact_path(raw) in paths:
                    out.add(it)
        spans = [(r[4], r[5]) for r in queued if r[2] == "transcript"]
        tip = None
        repo = self.repo(src)
        if repo.check() is None:
            tip = repo.trunk_tip()
            row = self.conn.execute("SELECT trunk_tip FROM git_state WHERE source = ?", (src.id,)).fetchone()
            trunk_moved = row is None or row[0] != tip
            if trunk_moved:
                old = row[0] if row else None
                forward = old is not None and tip is not None and repo.is_ancestor(old, tip)
                repo.forget(keep_shas=forward)  # names may point elsewhere now
                rows = self.conn.execute(
                    "SELECT iteration, commit_ref, json_extract(record, '$.impl.summary') FROM iteration_records"
                    " WHERE source = ? ORDER BY iteration", (src.id,)).fetchall()
                res = repo.resolve([r[1] for r in rows])
                self._ends[src.id] = {it: _ns(res[c].commit_time) for it, c, _ in rows}
                out |= self._trunk_affected(repo, old, tip, rows, res, forward)
            if out or spans:
                ends = self._commit_times(src, repo, {int(r[3]) for r in queued if r[2] == "iteration"
                                                      and r[1] == src.id})
                out |= window_successors(ends, out)
                if spans:
                    out |= windows_meeting(ends, spans)
        self._pending_tip = (src.id, tip)
        return sorted(out)

    def _commit_times(self, src: IterationLogSource, repo: GitRepo, changed: set[int]) -> list[tuple[int, int | None]]:
        """Every iteration's commit time, in iteration order, from an in-memory index
        built once and refreshed for ``changed`` iterations (and on trunk moves)."""
        ends = self._ends.get(src.id)
        if ends is None:
            rows = self.conn.execute("SELECT iteration, commit_ref FROM iterations WHERE source = ?",
                                     (src.id,)).fetchall()
            res = repo.resolve([r[1] for r in rows])
            ends = self._ends[src.id] = {it: _ns(res[c].commit_time) for it, c in rows}
        elif changed:
            rows = self.conn.execute(
                "SELECT iteration, commit_ref FROM iterations WHERE source = ? AND iteration IN"
                " (SELECT value FROM json_each(?))", (src.id, json.dumps(sorted(changed)))).fetchall()
            res = repo.resolve([r[1] for r in rows])
            present = {it for it, _ in rows}
            for it, c in rows:
                ends[it] = _ns(res[c].commit_time)
            for it in changed - present:
                ends.pop(it, None)  # removed
        return sorted(ends.items())

    def record_trunk(self, src: IterationLogSource) -> None:
        """After a pass that accounted for trunk moves, remember the tip it saw."""
        with store.write_transaction(self.conn):
            self._record_trunk_rows(src)

    def _record_trunk_rows(self, src: IterationLogSource) -> None:
        """``record_trunk``'s rows, inside the caller's transaction (a scoring pass's
        last: the queue entries it handled leave with the scores they produced)."""
        pending = getattr(self, "_pending_tip", None)
        tip = pending[1] if pending and pending[0] == src.id else self.repo(src).trunk_tip()
        consumed = getattr(self, "_consumed", None)
        ids = consumed[1] if consumed and consumed[0] == src.id else []
        self.conn.execute("INSERT OR REPLACE INTO git_state (source, trunk_tip) VALUES (?, ?)", (src.id, tip))
        if ids:  # only what this pass read: rows queued meanwhile stay queued
            self.conn.execute("DELETE FROM pending WHERE id IN (SELECT value FROM json_each(?))",
                              (json.dumps(ids),))
        self._consumed = None

    def _trunk_affected(self, repo: GitRepo, old: str | None, new: str | None, rows: list, res: dict,
                        forward: bool) -> set[int]:
        if not forward or old is None or new is None:
            return {r[0] for r in rows}  # first pass, no trunk, or rewritten history
        shas, subjects, runs = repo.range_facts(old, new)
        out = set()
        for it, commit, summary in rows:
            sha = res[commit].sha
            if sha:
                if sha in shas or any(sha.startswith(r) for r in runs):
                    out.add(it)
            elif summary and summary.strip().casefold() in subjects:
                out.add(it)
        return out

    def _artifact_refs_by_iteration(self, src: IterationLogSource) -> list[tuple[int, str, str]]:
        sql = (f"SELECT i.iteration, '{VERIFIER_RESULT}', json_extract(v.value, '$.result_artifact')"
               " FROM iteration_records i, json_each(i.record, '$.verifiers') v WHERE i.source = ?"
               f" UNION ALL SELECT i.iteration, '{REVIEW_DECISION}', json_extract(i.record, '$.review.decision_artifact')"
               " FROM iteration_records i WHERE i.source = ?")
        return [(r[0], r[1], r[2]) for r in self.conn.execute(sql, (src.id, src.id)) if r[2]]

    # -- transcript windows (spec §4.7) ----------------------------------------------------
    def _windows(self, src: IterationLogSource, repo: GitRepo, records: dict[int, Record],
                 resolutions: dict, *, partial_log: bool) -> dict[int, tuple[int | None, int]]:
        """(start, end] in UTC ns for each record whose commit time resolves.

        Windows chain in ascending iteration order over the whole log; unresolved
        records get none and do not move the chain. For a subset of iterations
        (``score N``) the chain starts at the nearest lower iteration that resolves."""
        ends = {it: _ns(resolutions[rec.commit].commit_time) for it, rec in records.items()}
        order = sorted(records)
        starts = {}
        if partial_log:  # where the chain restarts: the first iteration, and after each gap
            starts = self._previous_ends(src, repo, [it for k, it in enumerate(order)
                                                     if k == 0 or it - 1 not in records])
        out: dict[int, tuple[int | None, int]] = {}
        prev = None
        for it in order:
            if it in starts:
                prev = starts[it]
            end = ends[it]
            if end is None:
                continue
            out[it] = (prev, end)
            prev = end
        return out

    def _previous_ends(self, src: IterationLogSource, repo: GitRepo, iterations: list[int]) -> dict[int, int | None]:
        """Where each iteration's window starts when its predecessors are not being
        scored with it. Usually the iteration just below resolves: one query for all."""
        rows = self.conn.execute(
            "SELECT iteration, commit_ref FROM iterations WHERE source = ? AND iteration IN"
            " (SELECT value FROM json_each(?))", (src.id, json.dumps([it - 1 for it in iterations]))).fetchall()
        res = repo.resolve([r[1] for r in rows])
        below = {it: _ns(res[c].commit_time) for it, c in rows}
        return {it: below[it - 1] if below.get(it - 1) is not None else self._previous_end(src, repo, it)
                for it in iterations}

    def _previous_end(self, src: IterationLogSource, repo: GitRepo, iteration: int) -> int | None:
        """Commit time of the nearest iteration below ``iteration`` whose commit resolves."""
        below = iteration
        while True:
            rows = self.conn.execute(
                "SELECT iteration, commit_ref FROM iterations WHERE source = ? AND iteration < ?"
                " ORDER BY iteration DESC LIMIT 32", (src.id, below)).fetchall()
            if not rows:
                return None
            res = repo.resolve([r[1] for r in rows])
            for it, commit in rows:
                t = _ns(res[commit].commit_time)
                if t is not None:
                    return t
            below = rows[-1][0]

    def _fact_sums(self, src: IterationLogSource) -> FactSums | None:
        """The source's transcript window sums, brought up to date (None: no transcripts)."""
        dirs = tuple(str(d) for d in (*src.transcripts, *src.vally_transcripts))
        if not dirs:
            return None
        sums = self._sums.get(dirs)
        if sums is None:
            sums = self._sums[dirs] = FactSums(dirs)
        sums.refresh(self.conn)
        return sums

    def score(self, src: IterationLogSource, iterations: list[int] | None = None, *,
              progress: Progress | None = None, finish: Callable[[], None] | None = None) -> Report:
        """Score ``iterations`` (or all) and write what changed. ``finish`` runs inside
        the pass's last transaction (its own one when nothing needed a new score)."""
        report = Report()
        self._sweep(src)
        version = self.rubric.version
        marker = self.cfg.scoring.linked_traces_marker
        inputs = self.gather(src, iterations)
        sql = "SELECT iteration, inputs_hash FROM scores WHERE source = ? AND rubric_version = ?"
        args: list = [src.id, version]
        if iterations is not None:
            sql += " AND iteration IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(iterations))
        existing = {r[0]: r[1] for r in self.conn.execute(sql, args)}
        jobs = [(version, marker, x, record_json, existing.get(x.record.iteration)) for x, record_json in inputs]
        todo: list[Event] = []
        for (x, _), result in zip(inputs, pmap(_score_job, jobs)):
            if result is None:
                report.unchanged += 1
                continue
            payload, payload_json, payload_hash, data, data_sha = result
            it = payload["iteration"]
            prev = existing.get(it)
            ev = Event("score.computed", f"{src.id}:score:{it}", src.id,
                       f"score|{src.id}|{it}|{version}|{payload['inputs_hash']}|{prev or '-'}", payload,
                       content_hash=payload_hash, source_path=sidecars.iteration_sidecar_name(it),
                       extra={"json": payload_json, "sidecar_bytes": data, "sidecar_sha256": data_sha})
            todo.append(ev)
        done = 0
        fsync = self._fsync(len(todo))
        writer = None
        if len(todo) > AUTO_FSYNC_MAX:
            writer = self._writer or sidecars.BackgroundWriter()
        elif self._writer is not None:
            self._writer.wait()  # a direct write must not be overtaken by an older queued one
        sessions: set[str] = set()  # written here, from the bytes the projector rendered
        written: set[int] = set()

        def write(path: Path, data: bytes, kind: str, key: tuple) -> None:
            if writer is not None:
                writer.submit(path, data, fsync, kind, key)
            elif self._write(path, data, report, fsync):
                setattr(report, kind, getattr(report, kind) + 1)

        chunks = list(_chunks(todo))
        if finish is not None and not chunks:
            with store.write_transaction(self.conn):
                finish()
        try:
            for k, chunk in enumerate(chunks, 1):
                with store.write_transaction(self.conn):
                    projector = Projector(self.conn)
                    for ev in append_many(self.conn, chunk):
                        projector.apply(ev)
                        report.events += 1
                        report.scored += 1
                    projector.flush()
                    if finish is not None and k == len(chunks):
                        finish()
                for ev in chunk:  # after the commit: a sidecar never runs ahead of the ledger
                    written.add(ev.payload["iteration"])
                    write(src.path / ev.payload["sidecar"], ev.extra["sidecar_bytes"], "sidecars_written",
                          ("scores", src.id, ev.payload["iteration"], version, ev.extra["sidecar_sha256"]))
                for (_, session_id, v), (data, sha) in sorted(projector.session_bytes.items()):
                    if v != version:
                        continue
                    write(src.path / sidecars.session_sidecar_name(session_id), data, "sessions_written",
                          ("sessions", src.id, session_id, version, sha))
                    sessions.add(session_id)
                done += len(chunk)
                if progress:
                    progress(done, len(todo))
        finally:
            if writer is not None and writer is not self._writer:
                writer.close()
                report.add(self._writes_report(*writer.take()))
        # the sidecars of the scores that stood (the ledger may hold them from an earlier
        # activation of this rubric, or a file was edited): still brought in line
        report.add(self.sync_sidecars(src, iterations, skip_iterations=written, skip_sessions=sessions))
        return report

    def _still_current(self, key: tuple) -> bool:
        """Whether a queued sidecar's bytes (``key`` ends with their sha256) are still
        what the ledger holds (asked on the writer thread, through its own read-only
        connection). The close-task hook scores and writes in another process while
        the daemon's writes wait in the queue; without this, an older queued write
        could land over its newer file until the next reconcile."""
        table, source, ident, version, sha = key
        try:
            if self._check_conn is None:
                self._check_conn = store.connect_readonly(self.cfg.store.path)
            column = "iteration" if table == "scores" else "session_id"
            row = self._check_conn.execute(
                f"SELECT sidecar_sha256 FROM {table} WHERE source = ? AND {column} = ? AND rubric_version = ?",
                (source, ident, version)).fetchone()
        except sqlite3.Error:
            return True  # cannot tell: write, as without the check
        return row is not None and row[0] == sha

    def collect_writes(self) -> Report:
        """Sidecar writes (and their errors) the writer thread finished since the last call."""
        return self._writes_report(*self._writer.take()) if self._writer is not None else Report()

    @staticmethod
    def _writes_report(written: dict[str, int], errors: list[str]) -> Report:
        """Errors travel in the report, and whoever reads it prints or logs them once."""
        return Report(sidecars_written=written["sidecars_written"], sessions_written=written["sessions_written"],
                      errors=errors)

    def _fsync(self, count: int) -> bool:
        """Whether sidecar writes are fsynced: see ``[sidecars] fsync`` in config.example.toml."""
        mode = self.cfg.sidecars.fsync
        return mode == "always" or (mode == "auto" and count <= AUTO_FSYNC_MAX)

    # ------------------------------------------------------------------ sidecars
    def sync_sidecars(self, src: IterationLogSource, iterations: list[int] | None = None, *,
                      skip_iterations: Collection[int] = (), skip_sessions: Collection[str] = ()) -> Report:
        """Write every sidecar (of ``iterations``, or all) whose bytes on disk are not the ledger's."""
        report = Report()
        if not src.path.is_dir():
            report.errors.append(f"{src.path}: iteration-log directory is missing; sidecars not written")
            return report
        self._sweep(src)
        if iterations is None and self._writer is not None:
            self._writer.wait()  # compare the disk with the ledger once queued writes have landed
        version = self.rubric.version
        filt, args = "", [src.id, version]
        if iterations is not None:
            if not iterations:
                return report
            filt = " AND iteration IN (%s)" % ",".join("?" * len(iterations))
            args += list(iterations)
        rows = self.conn.execute(
            "SELECT s.iteration, s.sidecar, s.sidecar_sha256, e.type, e.schema_version, e.payload FROM scores s"
            " JOIN events e ON e.seq = s.seq WHERE s.source = ? AND s.rubric_version = ?" + filt, args)
        stale = [r for r in rows if r["iteration"] not in skip_iterations
                 and _disk_sha(src.path / r["sidecar"]) != r["sidecar_sha256"]]
        fsync = self._fsync(len(stale))
        for r in stale:
            data = render_score_payload(upcast(r["type"], r["schema_version"], json.loads(r["payload"])))
            report.sidecars_written += self._write(src.path / r["sidecar"], data, report, fsync)
        sql = "SELECT session_id, sidecar, sidecar_sha256 FROM sessions WHERE source = ? AND rubric_version = ?" \
              " AND sidecar IS NOT NULL"
        sargs: list = [src.id, version]
        if iterations is not None:
            sql += (" AND session_id IN (SELECT session_id FROM iterations WHERE source = ? AND iteration IN (%s))"
                    % ",".join("?" * len(iterations)))
            sargs += [src.id, *iterations]
        stale = [r for r in self.conn.execute(sql, sargs).fetchall() if r["session_id"] not in skip_sessions
                 and _disk_sha(src.path / r["sidecar"]) != r["sidecar_sha256"]]
        fsync = self._fsync(len(stale))
        for r in stale:
            data = session_document(self.conn, src.id, r["session_id"], version)
            if data is not None:
                report.sessions_written += self._write(src.path / r["sidecar"], data, report, fsync)
        return report

    def _sweep(self, src: IterationLogSource) -> None:
        """Remove temp files that killed writers left beside the sidecars (once per
        run, and at each daemon reconcile): a SIGKILL between a temp file's creation
        and its rename leaves one behind in the user's directory."""
        if src.id in self._swept:
            return
        self._swept.add(src.id)
        removed = sidecars.remove_stale_temps(src.path)
        if removed:
            log.info("removed %d temp file(s) left by killed writers in %s", removed, src.path)

    def _write(self, path: Path, data: bytes, report: Report, fsync: bool) -> int:
        try:
            return int(sidecars.write_atomic(path, data, durable=fsync))
        except OSError as exc:
            report.errors.append(f"cannot write {path}: {exc}")
            return 0

    # ------------------------------------------------------------------ rubric
    def state(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM ledger_state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def rubric_target(self) -> tuple[str, str | None]:
        """The rubric this ledger scores under, and why it would change (None: it is
        the active one). The rule (README, "Rubric versions"):

        * ``--rubric X`` on a command that scores activates X ("explicit"), and X
          stays active after the command;
        * the configured rubric (``[scoring] rubric``) activates when the
          configured value itself changed since the ledger last saw it
          ("configured"), or when nothing is active yet;
        * otherwise the active rubric stays, even where the configuration names
          another one (an explicit activation is not undone by the next run)."""
        explicit, configured = self.cfg.explicit_rubric, self.cfg.scoring.rubric
        active = self.state("active_rubric")
        if explicit:
            return explicit, None if explicit == active else "explicit"
        if active is None or self.state("configured_rubric") != configured:
            return configured, None if configured == active else "configured"
        return active, None

    def ensure_rubric(self, *, progress: Progress | None = None) -> Report | None:
        """Make ``self.rubric`` the active rubric (the rule is ``rubric_target``'s) and
        backfill (or resume a backfill) under it; also remember the configured value.
        Every sidecar is brought in line with the ledger after a backfill, including
        those whose score under this rubric was already in the ledger from an
        earlier activation."""
        want, have = self.rubric.version, self.state("active_rubric")
        configured = self.cfg.scoring.rubric
        reason = "explicit" if self.cfg.explicit_rubric else "configured"
        if have != want or self.state("configured_rubric") != configured:
            with store.write_transaction(self.conn):
                projector = Projector(self.conn)
                last = self.state("active_rubric_seq") or "0"
                if have == want:  # only the configured value moved: note it, nothing to rescore
                    events = [Event("rubric.configured", "ledger", "ledger",
                                    f"rubric-configured|{configured}|{self.state('configured_rubric')}|{last}",
                                    {"configured": configured, "active": want})]
                else:
                    events = [Event("rubric.activated", "ledger", "ledger", f"rubric|{have}->{want}|{last}",
                                    {"version": want, "previous": have, "reason": reason,
                                     "configured": configured})]
                    total = self.conn.execute("SELECT count(*) FROM iterations").fetchone()[0]
                    if self.conn.execute("SELECT 1 FROM scores LIMIT 1").fetchone() is not None:
                        events.append(Event("backfill.started", "ledger", "ledger",
                                            f"backfill|{want}|{last}|started",
                                            {"rubric": want, "previous": have, "iterations": total}))
                        self.announce(f"rubric {have} -> {want} ({reason}): rescoring {total:,} iterations")
                    elif have is not None:
                        self.announce(f"rubric {have} -> {want} ({reason})")
                for ev in events:
                    if append(self.conn, ev):
                        projector.apply(ev)
                projector.flush()
        if self.state("backfill") is None:
            return None
        return self.backfill(progress=progress)

    def backfill(self, *, progress: Progress | None = None) -> Report:
        """Rescore every iteration of every configured source under the active rubric.

        Resumable: iterations already scored under it (same inputs) are skipped,
        so a restarted backfill continues where the last one stopped."""
        report = Report()
        pending = json.loads(self.state("backfill") or "{}")
        total = self.conn.execute("SELECT count(*) FROM iterations").fetchone()[0]
        base = 0
        for src in self.cfg.iteration_logs:
            count = self.conn.execute("SELECT count(*) FROM iterations WHERE source = ?", (src.id,)).fetchone()[0]
            try:
                report.add(self.score(src, progress=(lambda d, t, b=base: progress(b + d, total)) if progress else None))
            except SourceError as exc:
                report.errors.append(str(exc))
                report.add(self.sync_sidecars(src))  # what the ledger holds under this rubric, at least
            base += count
        if pending and not report.errors:
            with store.write_transaction(self.conn):
                ev = Event("backfill.completed", "ledger", "ledger",
                           f"backfill|{pending['rubric']}|{pending['started_seq']}|completed",
                           {"rubric": pending["rubric"], "rescored": report.scored})
                if append(self.conn, ev):
                    Projector(self.conn).apply(ev)
        return report


# -- pure jobs (run in worker processes for bulk work) --------------------------------
def _observe_job(job: tuple) -> S.Observation | None:
    return S.observe(*job)


@contextlib.contextmanager
def _no_cyclic_gc():
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
    line number (quarantine), which only the caller knows."""
    from .sources import jsonl

    events_for, source, rel, path, chunk, max_line_bytes = job
    n_lines = 0

    def counted():
        nonlocal n_lines
        for item in jsonl.chunk_lines(path, chunk, max_line_bytes=max_line_bytes):
            n_lines = item.line_no
            yield item

    with _no_cyclic_gc():
        events = events_for(source, rel, jsonl.Batch(items=counted()), None)
        if any(ev.type == "source.quarantined" for ev in events):
            return chunk, n_lines, None
        return chunk, n_lines, PreparedTrials.of(events) or events


def _score_job(job: tuple) -> tuple[dict, str, str, bytes, str] | None:
    """Everything the ``score.computed`` event and its sidecar need, serialised here
    (in a worker, for bulk work), or None when the iteration's inputs did not change."""
    version, marker, x, record_json, prev = job
    digest = x.digest(f"{version}+marker" if marker else version, record_json)
    if digest == prev:
        return None
    payload = score_payload(score(rubrics.load(version), x), digest, marker)
    text = canonical_json(payload)
    data = render_score_payload(payload)
    return payload, text, content_hash(text.encode("utf-8")), data, sidecars.sha256(data)


def score_payload(s: Score, digest: str, marker: bool) -> dict:
    """The ``score.computed`` payload: the whole score, explainable, and what it came from."""
    f = encode_float
    breakdown = [{"signal": r.signal, "label": r.label, "present": r.present, "sub_score": f(r.sub_score),
                  "detail": r.detail, "nominal_weight": f(r.nominal_weight),
                  "effective_weight": f(r.effective_weight), "contribution": f(r.contribution)}
                 for r in s.breakdown]
    integrity = [{"signal": p.signal, "role": p.role,
                  "claimed": {"present": p.claimed.present, "sub_score": f(p.claimed.sub_score),
                              "detail": p.claimed.detail},
                  "observed": {"present": p.observed.present, "sub_score": f(p.observed.sub_score),
                               "detail": p.observed.detail},
                  "comparable": p.comparable, "delta": f(p.delta)} for p in s.integrity]
    return {
        "iteration": s.iteration, "rubric_version": s.rubric_version, "inputs_hash": digest,
        "scored": s.scored, "value": f(s.value), "band": s.band,
        "breakdown": breakdown, "integrity": integrity,
        "linked_traces": s.linked_traces, "marker": marker,
        "sidecar": sidecars.iteration_sidecar_name(s.iteration),
    }


def _ns(iso: str | None) -> int | None:
    if iso is None:
        return None
    return int(datetime.fromisoformat(iso).timestamp()) * 1_000_000_000


def _disk_sha(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return sidecars.sha256(fh.read())
    except OSError:
        return None
