"""Which rubric is active, and the backfill that follows a change.

The rule (README, "Rubric versions"): ``--rubric X`` on a command that scores
activates X and X stays active; the configured rubric activates when the
configured value itself changed since the ledger last saw it, or when nothing
is active yet; otherwise the active rubric stays.
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
from dataclasses import replace

from ..config import Config
from ..process import parallel
from ..scoring import rubric as rubric_data
from ..store.db import read_state
from ..store.events import Event
from . import commit
from .context import Context
from .planner import Planner
from .outcome import Outcome, Progress, SourceError
from .scoring_pass import ScoringPass
from .sidecar_sync import SidecarSync

log = logging.getLogger("agentledger")


def check(cfg: Config) -> None:
    """Raise UnknownRubric when ``cfg`` names a rubric this version does not know (a
    reload refuses such a configuration before anything changes)."""
    rubric_data.load(cfg.scoring.rubric)


def target(cfg: Config, conn: sqlite3.Connection) -> tuple[str, str | None]:
    """The rubric this ledger scores under, and why it would change (None: it is the
    active one already)."""
    explicit, configured = cfg.explicit_rubric, cfg.scoring.rubric
    active = read_state(conn, "active_rubric")
    if explicit:
        return explicit, None if explicit == active else "explicit"
    if active is None or read_state(conn, "configured_rubric") != configured:
        return configured, None if configured == active else "configured"
    return active, None


class Rubrics:
    def __init__(self, ctx: Context, planner: Planner, scoring: ScoringPass, sync: SidecarSync) -> None:
        self.ctx = ctx
        self.planner = planner
        self.scoring = scoring
        self.sync = sync

    def follow(self) -> None:
        """Score under the ledger's active rubric, whoever activated it: another
        process (the close-task hook with ``--rubric``) may have since this one
        last looked. One read; no event."""
        ctx = self.ctx
        active = ctx.state("active_rubric")
        if active is not None and active != ctx.rubric.version:
            log.info("following rubric %s, activated in the ledger by another process (was %s)",
                     active, ctx.rubric.version)
            ctx.rubric = rubric_data.load(active)

    def ensure(self, *, progress: Progress | None = None) -> Outcome | None:
        """Make the rubric the rule names (``target``) the active one and backfill (or
        resume a backfill) under it; also remember the configured value. None when
        nothing was to do.

        The rule is decided again inside the write transaction (``BEGIN IMMEDIATE``),
        so concurrent activations serialise and the last one wins; ``--rubric`` is
        consumed by its first activation, after which this process follows the
        ledger like any other (``follow``)."""
        ctx = self.ctx
        configured = ctx.cfg.scoring.rubric
        want, why = target(ctx.cfg, ctx.conn)
        if why is not None or ctx.state("configured_rubric") != configured:
            with commit.transaction(ctx) as batch:
                want, why = target(ctx.cfg, ctx.conn)
                have = ctx.state("active_rubric")
                reason = "explicit" if ctx.cfg.explicit_rubric else "configured"
                last = ctx.state("active_rubric_seq") or "0"
                if have == want:  # only the configured value moved: note it, nothing to rescore
                    if ctx.state("configured_rubric") != configured:
                        events = [Event("rubric.configured", "ledger", "ledger",
                                        f"rubric-configured|{configured}|{ctx.state('configured_rubric')}|{last}",
                                        {"configured": configured, "active": want})]
                    else:
                        events = []
                else:
                    events = [Event("rubric.activated", "ledger", "ledger", f"rubric|{have}->{want}|{last}",
                                    {"version": want, "previous": have, "reason": reason,
                                     "configured": configured})]
                    total = sum(_counts(ctx).values())
                    if ctx.conn.execute("SELECT 1 FROM scores LIMIT 1").fetchone() is not None:
                        # the scores under ``have`` are current (no backfill was under way): a
                        # score under ``want`` with their inputs key stands (``backfill``)
                        reuse = have if ctx.state("backfill") is None else None
                        events.append(Event("backfill.started", "ledger", "ledger",
                                            f"backfill|{want}|{last}|started",
                                            {"rubric": want, "previous": have, "iterations": total,
                                             "reuse": reuse}))
                        ctx.announce(f"rubric {have} -> {want} ({reason}): rescoring {total:,} iterations")
                    elif have is not None:
                        ctx.announce(f"rubric {have} -> {want} ({reason})")
                batch.append(events)
        if ctx.cfg.explicit_rubric is not None:
            ctx.cfg = replace(ctx.cfg, explicit_rubric=None)
        if ctx.rubric.version != want:
            ctx.rubric = rubric_data.load(want)
        if ctx.state("backfill") is None:
            return None
        return self.backfill(progress=progress)

    def backfill(self, *, progress: Progress | None = None) -> Outcome:
        """Rescore every iteration of every configured source under the active rubric,
        and bring every sidecar in line with the ledger.

        A switch to a rubric whose scores exist costs what it writes: a score under it
        stands when the rubric switched away from (``reuse``, whose scores were
        current then) has one with the same inputs key and nothing queued since can
        have moved its inputs (``Planner.affected``); only the others are gathered and
        scored. Resumable: iterations already scored under it (same inputs) are
        skipped, so a restarted backfill continues where the last one stopped."""
        ctx = self.ctx
        report = Outcome()
        pending = json.loads(ctx.state("backfill") or "{}")
        counts = _counts(ctx)
        total = sum(counts.values())
        base = 0
        for src in ctx.cfg.iteration_logs:
            count = counts[src.id]
            try:
                report.add(self._backfill(src, pending.get("reuse"), count,
                                          (lambda d, t, b=base: progress(b + d, total)) if progress else None))
            except SourceError as exc:
                report.errors.append(str(exc))
                report.add(self.sync.sync(src))  # what the ledger holds under this rubric, at least
            base += count
        if pending and not report.errors:
            ctx.log.commit([Event("backfill.completed", "ledger", "ledger",
                                  f"backfill|{pending['rubric']}|{pending['started_seq']}|completed",
                                  {"rubric": pending["rubric"], "rescored": report.scored})])
        return report

    def _backfill(self, src, reuse: str | None, count: int, progress: Progress | None) -> Outcome:
        """One source's part of ``backfill``; it also consumes the planner's queue, so
        no pass after it needs to look at this source again."""
        parallel.prestart(count)  # the workers start while the planner looks
        with self.ctx.repo(src).one_view():
            todo = set(self.planner.affected(src)) | set(self.scoring.unverified(src))
            finish = functools.partial(self.planner.record_trunk_rows, src)
            if reuse is not None:
                todo |= set(self.scoring.not_reusable(src, reuse))
                if len(todo) < count:
                    return self.scoring.score(src, sorted(todo), finish=finish, progress=progress, sync_all=True)
            return self.scoring.score(src, finish=finish, progress=progress)


def _counts(ctx: Context) -> dict[str, int]:
    """The iterations of each configured source: those a backfill rescores (a source the
    ledger still holds but no longer reads keeps its scores, and counted in the total it made
    the announcement and the progress promise what the pass never did)."""
    ids = [s.id for s in ctx.cfg.iteration_logs]
    got = dict(ctx.conn.execute("SELECT source, count(*) FROM iterations WHERE source IN"
                                " (SELECT value FROM json_each(?)) GROUP BY source", (json.dumps(ids),)))
    return {i: got.get(i, 0) for i in ids}
