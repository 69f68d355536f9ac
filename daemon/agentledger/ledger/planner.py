"""Which iterations a change can affect, so a pass rescores only those.

Ingestion queues what it touched in the ``pending`` table, in the same
transaction as the events (a crash loses no work); a pass reads the queue, adds
the trunk's moves and the transcript windows a new line falls in, and consumes
the entries it handled in its own last transaction.
"""

from __future__ import annotations

import json
import os

from ..config import IterationLogSource
from ..sources.iterlogs.artifacts import REVIEW_DECISION, VERIFIER_RESULT, resolve_artifact_path
from ..sources.git import GitRepo
from ..sources.trunk_log import range_facts
from ..store import db as store
from .context import Context
from .inputs import iso_ns
from .trunk_index import TrunkIndex
from .windows import Ends, windows_meeting


FEW = 64  # changed iterations whose successors are looked up one by one when no index is built


class Planner:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.ends: dict[str, Ends] = {}  # source -> iteration -> commit time (ns)
        self._consumed: tuple[str, list[int]] | None = None  # pending rows the current pass read
        self._pending_tip: tuple[str, str | None] | None = None  # the trunk tip the current pass saw
        self._recorded_tip: tuple[str, str | None] | None = None  # and the one git_state held then
        # source -> its iterations' commit references and their resolutions: what a forward
        # move of the trunk is checked against, kept up to date with changed iterations, so
        # a commit on the trunk costs its own range, not a pass over the log
        self.facts: dict[str, TrunkIndex] = {}
        # git_state.consumer: the mark of the last consumption of each source's queue this
        # process made or has seen (``_foreign_consumer``)
        self._token, self._writes = os.urandom(8).hex(), 0
        self._marks: dict[str, str] = {}

    def forget(self) -> None:
        """Drop the commit-time index (a full scan rebuilds it from the table and git)."""
        self.ends.clear()
        self.facts.clear()

    def affected(self, src: IterationLogSource, *, backstop: bool = True) -> list[int]:
        """The iterations whose score inputs may have changed since the last pass.

        From what ingestion queued: changed records (and the next iteration whose
        commit resolves: its window starts at theirs), hook/labels files, records
        pointing at a changed artifact (any iteration with a task id when a plan's
        TASKS.yaml changed), transcript lines (the windows they fall in), and the
        trunk (commits that became reachable, reverts and subjects in old..new, or
        everything if history was rewritten); plus iterations with no score under
        the active rubric (``backstop``: a query over every iteration, ~40 ms at 100,000,
        left out when a change notification is handled: what it changed is queued, and the
        daemon's periodic reconcile and trunk checks keep the backstop; and in a full scan
        whose mark holds: ``ScanMarks.in_line``). A full pass
        (``score(src)``) stays the backstop of the backstop."""
        conn = self.ctx.conn
        dirs = [str(d) for d in (*src.transcripts, *src.vally_transcripts)]
        queued = conn.execute(
            "SELECT id, source, kind, key, lo, hi FROM pending WHERE source = ? OR source IN"
            " (SELECT value FROM json_each(?))", (src.id, json.dumps(dirs))).fetchall()
        self._consumed = (src.id, [r[0] for r in queued])
        out = {int(r[3]) for r in queued if r[2] == "iteration" and r[1] == src.id}
        if backstop:
            out |= {r[0] for r in conn.execute(
                "SELECT iteration FROM iterations WHERE source = ? AND iteration NOT IN"
                " (SELECT iteration FROM scores WHERE source = ? AND rubric_version = ?)",
                (src.id, src.id, self.ctx.rubric.version))}
        paths = {r[3] for r in queued if r[2] == "artifact" and r[1] == src.id}
        if paths and out.issuperset(r[0] for r in conn.execute(
                "SELECT iteration FROM iterations WHERE source = ?", (src.id,))):
            paths = set()  # every iteration is in already (a first pass): no record needs reading for its paths
        if paths:
            if any(p.startswith(".agents/workflow/plans/") for p in paths):
                out |= {r[0] for r in conn.execute(
                    "SELECT iteration FROM iterations WHERE source = ? AND trim(task_id) <> ''", (src.id,))}
            for it, _kind, raw in self._artifact_refs_by_iteration(src):
                if resolve_artifact_path(raw) in paths:
                    out.add(it)
        spans = [(r[4], r[5]) for r in queued if r[2] == "transcript"]
        tip = None
        fresh = False
        self._recorded_tip = None
        row = conn.execute("SELECT trunk_tip, consumer FROM git_state WHERE source = ?", (src.id,)).fetchone()
        self._foreign_consumer(src, row[1] if row else None)
        repo = self.ctx.repo(src)
        if repo.check() is None:
            tip = repo.trunk_tip()
            self._recorded_tip = (src.id, row[0]) if row else None
            if row is None or row[0] != tip:  # the trunk moved
                old = row[0] if row else None
                forward = old is not None and tip is not None and repo.is_ancestor(old, tip)
                repo.forget(keep_shas=forward, fresh_at=tip)  # names may point elsewhere now
                cached = self.facts.get(src.id) if forward and src.id in self.ends else None
                fresh = cached is None  # made from the tables as they are now: no changed iteration to refresh
                if not forward or old is None or tip is None:  # first pass, no trunk, or rewritten history:
                    # every iteration, and no index of their commits (what a later move is checked
                    # against: that move builds it from the tables, ~0.1 s at 10,000 a one-off
                    # command would never use)
                    self.facts.pop(src.id, None)
                    self.ends.pop(src.id, None)
                    out |= set(self._commit_times(src, repo, set()).at)
                elif cached is None:
                    rows = conn.execute(
                        "SELECT iteration, commit_ref, json_extract(record, '$.impl.summary') FROM iteration_records"
                        " WHERE source = ? ORDER BY iteration", (src.id,)).fetchall()
                    res = repo.resolve([r[1] for r in rows])
                    cached = self.facts[src.id] = TrunkIndex([tuple(r) for r in rows], res)
                    self.ends[src.id] = Ends({it: iso_ns(res[c].commit_time) for it, c, _ in rows})
                    self.ctx.check_stop()  # the index took a while (~3.5 s at 100,000): a SIGTERM ends the pass here
                if cached is not None:
                    shas, subjects, runs = range_facts(repo, old, tip)
                    out |= self._moved_forward(src, repo, cached, shas)
                    out |= cached.on_trunk(shas, subjects, runs)
            # the commit-time index (every iteration's commit resolved) only where it pays: it is
            # kept up to date once built (the service); a one-off command's few changes look up
            # their successors alone, and a pass that takes every iteration needs none
            indexed = src.id in self.ends
            if out and not spans and not indexed and len(out) <= FEW:
                out |= self._next_resolving(src, repo, out)
            elif (out or spans) and (indexed or len(out) <= FEW or not self._covers_all(src, out)):
                ends = self._commit_times(src, repo, set() if fresh else {
                    int(r[3]) for r in queued if r[2] == "iteration" and r[1] == src.id})
                out |= ends.successors(out)
                if spans:
                    out |= windows_meeting(ends.items(), spans)
        self._pending_tip = (src.id, tip)
        return sorted(out)

    def _next_resolving(self, src: IterationLogSource, repo: GitRepo, changed: set[int]) -> set[int]:
        """``Ends.successors(changed)`` without the index of every iteration's commit time:
        the iterations after each changed one, a few at a time, until one's commit
        resolves (nearly always the next). A one-off command (``ingest --once``) that
        finds a few records changed and no trunk move resolves a few commits, not every
        iteration's (two git processes over 10,000 commits, ~0.25 s)."""
        conn, out, step = self.ctx.conn, set(), 4
        todo = {it: it for it in changed}  # changed iteration -> the last one looked at after it
        while todo:
            after = {it: conn.execute("SELECT iteration, commit_ref FROM iterations WHERE source = ? AND iteration > ?"
                                      " ORDER BY iteration LIMIT ?", (src.id, last, step)).fetchall()
                     for it, last in todo.items()}
            res = repo.resolve([c for rows in after.values() for _, c in rows])
            for it, rows in after.items():
                hit = next((j for j, c in rows if iso_ns(res[c].commit_time) is not None), None)
                if hit is not None or len(rows) < step:  # found, or no later iteration resolves
                    out.update(() if hit is None else (hit,))
                    del todo[it]
                else:
                    todo[it] = rows[-1][0]
            step = min(4 * step, 1024)
        return out

    def _covers_all(self, src: IterationLogSource, out: set[int]) -> bool:
        """Whether ``out`` holds every iteration of ``src`` (a first pass under a rubric):
        then no successor or window can add one, and no commit need be resolved here (the
        pass's gathering resolves each part's as the workers start on the first)."""
        return self.ctx.conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM iterations WHERE source = ? AND iteration NOT IN"
            " (SELECT value FROM json_each(?)))", (src.id, json.dumps(sorted(out)))).fetchone()[0] == 1

    def _moved_forward(self, src: IterationLogSource, repo: GitRepo, index: TrunkIndex,
                       shas: set[str]) -> set[int]:
        """After a forward move: resolve again the references that may now mean something
        else — names, and the abbreviated SHAs of missing commits that one of the new
        commits' SHAs begins with; the iterations whose resolution changed."""
        again = index.moved_refs(shas)
        if not again:
            return set()
        out = index.resolve(repo.resolve(again))
        ends = self.ends[src.id]
        for it in out:
            ends[it] = iso_ns(index.res[index.refs[it][0]].commit_time)
        return out

    def _foreign_consumer(self, src: IterationLogSource, mark: str | None) -> None:
        """Another writer consumed this source's queue since this process last did (an
        ``agentledger ingest`` beside the service): the changes it handled never reached
        this process's index, so the index is dropped and rebuilt from the tables."""
        if mark is not None and mark != self._marks.get(src.id):
            self.ends.pop(src.id, None)
            self.facts.pop(src.id, None)
            self._marks[src.id] = mark

    def record_trunk(self, src: IterationLogSource) -> None:
        """After a pass that accounted for trunk moves, remember the tip it saw; nothing
        is written when the ledger holds that tip already and the pass consumed no queue
        entry (an idle daemon's trunk check every 30 s commits nothing, so no checkpoint
        follows it either)."""
        consumed = self._consumed
        if (self._pending_tip is not None and self._pending_tip == self._recorded_tip
                and self._pending_tip[0] == src.id and not (consumed and consumed[0] == src.id and consumed[1])):
            self._consumed = None
            return
        with store.write_transaction(self.ctx.conn):
            self.record_trunk_rows(src)

    def record_trunk_rows(self, src: IterationLogSource) -> None:
        """``record_trunk``'s rows, inside the caller's transaction (a scoring pass's
        last: the queue entries it handled leave with the scores they produced)."""
        pending = self._pending_tip
        tip = pending[1] if pending and pending[0] == src.id else self.ctx.repo(src).trunk_tip()
        consumed = self._consumed
        ids = consumed[1] if consumed and consumed[0] == src.id else []
        self._writes += 1
        mark = self._marks[src.id] = f"{self._token}:{self._writes}"
        self.ctx.conn.execute("INSERT OR REPLACE INTO git_state (source, trunk_tip, consumer) VALUES (?, ?, ?)",
                              (src.id, tip, mark))
        if ids:  # only what this pass read: rows queued meanwhile stay queued
            self.ctx.conn.execute("DELETE FROM pending WHERE id IN (SELECT value FROM json_each(?))",
                                  (json.dumps(ids),))
        self._consumed = None

    def _commit_times(self, src: IterationLogSource, repo: GitRepo, changed: set[int]) -> Ends:
        """Every iteration's commit time, in iteration order, from an in-memory index
        built once and refreshed for ``changed`` iterations (and on trunk moves)."""
        conn = self.ctx.conn
        ends = self.ends.get(src.id)
        if ends is None:
            rows = conn.execute("SELECT iteration, commit_ref FROM iterations WHERE source = ?",
                                (src.id,)).fetchall()
            res = repo.resolve([r[1] for r in rows])
            ends = self.ends[src.id] = Ends({it: iso_ns(res[c].commit_time) for it, c in rows})
        elif changed:
            rows = conn.execute(
                "SELECT iteration, commit_ref, json_extract(record, '$.impl.summary') FROM iteration_records"
                " WHERE source = ? AND iteration IN (SELECT value FROM json_each(?))",
                (src.id, json.dumps(sorted(changed)))).fetchall()
            res = repo.resolve([r[1] for r in rows])
            present = {it for it, _, _ in rows}
            facts = self.facts.get(src.id)
            for it, c, summary in rows:
                ends[it] = iso_ns(res[c].commit_time)
                if facts is not None:
                    facts.set(it, c, summary)
                    facts.resolve({c: res[c]})
            for it in changed - present:
                ends.pop(it)  # removed
                if facts is not None:
                    facts.drop(it)
        return ends

    def _artifact_refs_by_iteration(self, src: IterationLogSource) -> list[tuple[int, str, str]]:
        sql = (f"SELECT i.iteration, '{VERIFIER_RESULT}', json_extract(v.value, '$.result_artifact')"
               " FROM iteration_records i, json_each(i.record, '$.verifiers') v WHERE i.source = ?"
               f" UNION ALL SELECT i.iteration, '{REVIEW_DECISION}', json_extract(i.record, '$.review.decision_artifact')"
               " FROM iteration_records i WHERE i.source = ?")
        return [(r[0], r[1], r[2]) for r in self.ctx.conn.execute(sql, (src.id, src.id)) if r[2]]

