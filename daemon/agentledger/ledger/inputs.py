"""Scoring inputs, gathered from the projections and batched git facts: each
iteration's effective record, its side files, the artifacts it points at, whether
its commit landed, and its transcript window's totals (spec §4.7)."""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from ..config import IterationLogSource
from ..sources.iterlogs.artifacts import REVIEW_DECISION, TASKS, VERIFIER_RESULT, resolve_artifact_path
from ..sources.git import GitRepo
from .context import Context
from .outcome import SourceError
from .windows import FactSums

if TYPE_CHECKING:  # the data model: imported by a pass that gathers (gathered.py)
    from ..model import Artifact
    from .gathered import Gathered


def iso_ns(iso: str | None) -> int | None:
    """A commit time (ISO 8601, whole seconds as git gives them) in UTC nanoseconds."""
    if iso is None:
        return None
    return int(datetime.fromisoformat(iso).timestamp()) * 1_000_000_000


class _Fields:
    """What gathering reads of a record: its commit, summary, task and artifact paths, as
    ``Record.from_json`` would give them, taken out of its stored JSON by SQLite
    (``FIELDS_SQL``, one parse in C) rather than by decoding the whole record here: at
    10,000 iterations that decoding was ~0.2 s of the committing process's CPU in a pass."""

    __slots__ = ("commit", "summary", "task_id", "verifier_artifacts", "decision_artifact")

    def __init__(self, extracted: str) -> None:
        # every key is there: the stored JSON is ``to_jsonable`` of a whole ``Record``
        self.commit, self.summary, self.task_id, self.decision_artifact, verifiers = json.loads(extracted)
        self.verifier_artifacts = [v.get("result_artifact", "") for v in verifiers or ()]


# ``_Fields``' values, in its order, as one JSON array
FIELDS_SQL = "json_extract(record, '$.commit', '$.impl.summary', '$.task_id', '$.review.decision_artifact', '$.verifiers')"


_PLANS = ".agents/workflow/plans/"  # where every TASKS.yaml artifact is (files.tasks_candidates)


class Inputs:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._sums: dict[tuple[str, ...], FactSums] = {}  # transcript directories -> window sums
        self._conn: sqlite3.Connection | None = None  # ``reading``'s

    @property
    def conn(self) -> sqlite3.Connection:
        return self._conn or self.ctx.conn

    def reading(self, conn: sqlite3.Connection) -> Inputs:
        """These inputs read through ``conn`` (a thread gathering a pass's next part has a
        connection of its own); the window sums they keep up to date are these ones."""
        other = copy.copy(self)
        other._conn = conn
        return other

    def effective_json(self, src: IterationLogSource, iterations: list[int] | None) -> dict[int, str]:
        """The effective record JSON of each iteration (all, or ``iterations``)."""
        return {r[0]: r[1] for r in self._records(src, iterations, "record")}

    def _records(self, src: IterationLogSource, iterations: list[int] | None, columns: str) -> sqlite3.Cursor:
        """(iteration, ``columns``…) of each iteration's effective record (all, or ``iterations``), in order."""
        sql = f"SELECT iteration, {columns} FROM iteration_records WHERE source = ?"
        args: list = [src.id]
        if iterations is not None:
            sql += " AND iteration IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(list(iterations)))
        return self.conn.execute(sql + " ORDER BY iteration", args)

    def gather(self, src: IterationLogSource, iterations: list[int] | None = None) -> list[Gathered]:
        """Scoring inputs of each iteration, its record still as its stored JSON text."""
        from ..model import HookOutcomes, Labels
        from ..scoring.facts import TranscriptTotals
        from .gathered import Gathered

        texts, records = {}, {}
        for it, text, fields in self._records(src, iterations, f"record, {FIELDS_SQL}"):
            texts[it] = text
            records[it] = _Fields(fields)
        if not texts:
            return []
        repo = self.ctx.repo(src)
        problem = repo.check()
        if problem:
            raise SourceError(f"cannot score {src.label}: {problem}")
        hooks = self._side("hook_outcomes", src, records, HookOutcomes)
        labels = self._side("labels", src, records, Labels)
        wanted = None
        if iterations is not None:
            wanted = {p for rec in records.values()
                      for p in [resolve_artifact_path(a) for a in rec.verifier_artifacts]
                      + [resolve_artifact_path(rec.decision_artifact)] if p}
        arts, tasks = self._artifacts(src, wanted)
        batch = len(records) > 8
        # for a part of the log, the iteration below each place its chain of windows restarts
        # (``_previous_ends``), read once and resolved in the same batch
        chain = _chain_starts(records) if iterations is not None else None
        below = self._below(src, chain) if chain else []
        resolutions = repo.resolve([r.commit for r in records.values()] + [c for _, c in below])

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
        windows = self._windows(src, repo, {it: r.commit for it, r in records.items()}, resolutions,
                                chain=chain, below=below)
        sums = self._fact_sums(src)
        partial = []
        for it, rec in records.items():
            res = resolutions[rec.commit]
            landed = repo.landed(rec.commit, rec.summary, res, trunk, batch=batch)
            partial.append((it, rec, res, landed, write_scope(rec.task_id) if landed.resolved else None))
        changed = repo.changed_files([p[3].resolved for p in partial if p[4] is not None])
        out = []
        for it, rec, res, landed, scope in partial:
            facts = {
                "trunk": src.trunk, "hook": hooks.get(it), "labels": labels.get(it),
                "verifier_artifacts": tuple(artifact(a, VERIFIER_RESULT) for a in rec.verifier_artifacts),
                "review_artifact": artifact(rec.decision_artifact, REVIEW_DECISION),
                "landed": landed, "write_scope": scope,
                "changed_files": changed.get(landed.resolved) if scope is not None else None,
                "commit_time": res.commit_time,
                "transcript": (TranscriptTotals(*sums.total(*windows[it])) if sums else TranscriptTotals())
                if it in windows else None,
            }
            out.append(Gathered(it, texts[it], facts, windows.get(it) if sums else None))
        return out

    def _side(self, table: str, src: IterationLogSource, iterations: Iterable[int], cls: type) -> dict[int, object]:
        from ..model import from_jsonable

        its = list(iterations)
        if not its:
            return {}
        rows = self.conn.execute(
            f"SELECT iteration, outcome FROM {table} WHERE source = ? AND iteration IN (SELECT value FROM json_each(?))",
            (src.id, json.dumps(its)))
        return {r[0]: from_jsonable(cls, json.loads(r[1])) for r in rows}

    def _artifacts(self, src: IterationLogSource, paths: set[str] | None) -> tuple[dict[str, Artifact], list[Artifact]]:
        """Artifacts at ``paths`` (all when None) and every plan's TASKS.yaml, in path order."""
        from ..model import Artifact, from_jsonable

        if paths is None:
            sql, args = "SELECT path, artifact FROM artifacts WHERE source = ?", [src.id]
        else:  # two look-ups by path: "kind = tasks OR path IN …" scanned every artifact (14 ms at 100,000)
            sql = ("SELECT path, artifact FROM artifacts WHERE source = ? AND path >= ? AND path < ? AND kind = ?"
                   " UNION SELECT path, artifact FROM artifacts WHERE source = ? AND path IN"
                   " (SELECT value FROM json_each(?))")
            args = [src.id, _PLANS, _PLANS[:-1] + chr(ord("/") + 1), TASKS, src.id, json.dumps(sorted(paths))]
        arts: dict[str, Artifact] = {}
        tasks: list[Artifact] = []
        for r in self.conn.execute(sql + " ORDER BY path", args):
            a = from_jsonable(Artifact, json.loads(r[1]))
            arts[r[0]] = a
            if a.kind == TASKS:
                tasks.append(a)
        return arts, tasks

    # -- transcript windows (spec §4.7) ----------------------------------------------------
    def _windows(self, src: IterationLogSource, repo: GitRepo, records: dict[int, str], resolutions: dict, *,
                 chain: list[int] | None, below: list[tuple[int, str]]) -> dict[int, tuple[int | None, int]]:
        """(start, end] in UTC ns for each record whose commit time resolves.

        Windows chain in ascending iteration order over the whole log; unresolved
        records get none and do not move the chain. For a subset of iterations
        (``score N``) the chain starts at the nearest lower iteration that resolves:
        ``chain`` (None: the whole log) is where it restarts (the first iteration, and
        after each gap), ``below`` the iteration and commit just below each of those."""
        ends = {it: iso_ns(resolutions[commit].commit_time) for it, commit in records.items()}
        order = sorted(records)
        starts = {}
        if chain is not None:
            starts = self._previous_ends(src, repo, chain, below)
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

    def _previous_ends(self, src: IterationLogSource, repo: GitRepo, iterations: list[int],
                       rows: list[tuple[int, str]]) -> dict[int, int | None]:
        """Where each iteration's window starts when its predecessors are not being
        scored with it. Usually the iteration just below (``rows``) resolves."""
        res = repo.resolve([r[1] for r in rows])
        below = {it: iso_ns(res[c].commit_time) for it, c in rows}
        return {it: below[it - 1] if below.get(it - 1) is not None else self._previous_end(src, repo, it)
                for it in iterations}

    def _below(self, src: IterationLogSource, iterations: list[int]) -> list[tuple[int, str]]:
        """(iteration, commit) of the iteration just below each of ``iterations``."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT iteration, commit_ref FROM iterations WHERE source = ? AND iteration IN"
            " (SELECT value FROM json_each(?))", (src.id, json.dumps([it - 1 for it in iterations])))]

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
                t = iso_ns(res[commit].commit_time)
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


def _chain_starts(iterations) -> list[int]:
    """Of ``iterations`` (a part of the log), those whose window starts where an iteration
    not among them ends: the first, and each one after a gap."""
    order = sorted(iterations)
    return [it for k, it in enumerate(order) if k == 0 or it - 1 not in iterations]
