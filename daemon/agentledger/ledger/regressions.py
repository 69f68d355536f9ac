"""Regressions and improvements noticed while they happen.

After each step the ledger reads what is new in every *feed* — a source's stream of
points in the order they arrive: an iteration log's scores under the active rubric (the
overall score and each signal's sub-score), a vally source's trials (pass or fail, one
stream per eval), an annotation source's trajectories (solved or not) — and hands each
point to that stream's change-point detector (``analysis/changepoint.py``). A detection
becomes a ``regression.detected`` or ``improvement.detected`` event: where the shift
began and where it was noticed, its size, the signals that moved with it, and what
changed at that point (rubric, model, agent, variant, configuration: each point's
attributes, compared with the point before). The feed's position and its detectors'
state are a checkpoint (``DetectorCheckpoint``) committed with those events, so a point
is read once, whichever process (daemon or close-task hook) gets there first.

Points that arrive behind a feed's position (an older iteration scored late) are not
fed; a backfill under way holds the iteration feeds until it completes. Once committed,
each detection is logged and, when ``[detect] command`` is set, handed to that command
as JSON on stdin (``process/command.py``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store.detections import TYPES, DetectorCheckpoint, load_checkpoint
from ..store.events import Event
from .commit import record, transaction
from .context import Context
from .outcome import Outcome

if TYPE_CHECKING:
    from ..analysis.changepoint import Detection

log = logging.getLogger("agentledger")

SLACK = 25  # a change this many points before a shift's estimated start is still "at that point"
KEEP_CHANGES = 32  # the changes a scope remembers
MOVED_SD = 0.5  # a signal moved with a shift when its mean moved by this many of its SDs
CHUNK = 5000  # points read at a time


@dataclass
class Point:
    position: int  # the feed's order: an iteration number or an event seq
    label: str  # how people name it: "iteration 120"
    at: str | None  # its date or time
    scope: str  # the stream family it belongs to (a trial's eval; '' otherwise)
    values: dict[str, float]  # metric -> value
    attrs: dict[str, Any]  # what can change under a stream: rubric, model, agent, variant, …


@dataclass
class Found:
    scope: str
    metric: str
    detection: Detection
    noticed: Point
    reference: dict[str, tuple[float, float]]  # each metric's (mean, SD) before the point
    prior: dict[str, list]  # each metric's last detection: [noticed position, its reference mean, SD]
    changed: list[dict[str, Any]]


class FeedState:
    """A feed's detectors (one per scope and metric) and, per scope, the points seen,
    the last value of each attribute, the changes of the last ``KEEP_CHANGES``, and each
    metric's last detection with the reference it was measured against (a signal that
    was itself detected a moment before a score's detection moved against the old
    reference, not the one learnt since)."""

    def __init__(self, saved: dict[str, Any] | None, binary: bool | None) -> None:
        from ..analysis.changepoint import Detector  # only once there is something to feed

        saved = saved or {"detectors": {}, "scopes": {}}
        self.binary = binary
        self.new_detector = Detector
        self.detectors = {k: Detector.restore(v) for k, v in saved["detectors"].items()}
        self.scopes: dict[str, dict[str, Any]] = saved["scopes"]
        self._scoped: dict[str, dict[str, Any]] = {}  # scope -> metric -> its detector (in ``detectors``)

    def dump(self) -> dict[str, Any]:
        return {"detectors": {k: d.state() for k, d in sorted(self.detectors.items())}, "scopes": self.scopes}

    def add(self, p: Point) -> list[Found]:
        scope = self.scopes.get(p.scope)
        if scope is None:
            scope = self.scopes[p.scope] = {"n": 0, "last": {}, "changes": [], "prior": {}}
        index = scope["n"]
        scope["n"] = index + 1
        last = scope["last"]
        for what, value in p.attrs.items():
            if what in last and last[what] != value:
                scope["changes"] = [*scope["changes"], [index, p.label, what, last[what], value]][-KEEP_CHANGES:]
            last[what] = value
        reference = {}
        found = []
        dets = self._scoped.get(p.scope)
        if dets is None:
            dets = self._scoped[p.scope] = {}
        at = [index, p.position, p.label, p.at]  # one list a point, read only (each metric's runs keep it)
        for metric, value in p.values.items():
            det = dets.get(metric)
            if det is None:
                key = f"{p.scope}\x1f{metric}"
                det = self.detectors.get(key)
                if det is None:
                    det = self.detectors[key] = self.new_detector(binary=self.binary)
                dets[metric] = det
            reference[metric] = (det.mean, det.sd)
            hit = det.add(value, at)
            if hit is not None:
                scope["prior"][metric] = [p.position, hit.before, reference[metric][1]]
                start = hit.start_label[0] if hit.start_label else index
                changed = [{"what": w, "from": a, "to": b, "at": label} for i, label, w, a, b in scope["changes"]
                           if start - SLACK <= i <= index]
                found.append(Found(p.scope, metric, hit, p, reference, dict(scope["prior"]), changed))
        return found


class Feed:
    kind = ""
    binary: bool | None = None  # pass/fail streams; None: each stream decides after its warm-up

    def __init__(self, source: str) -> None:
        self.source = source
        self.name = f"{self.kind}:{source}"

    def has_new(self, conn: sqlite3.Connection, after: int) -> bool:
        raise NotImplementedError

    def points(self, conn: sqlite3.Connection, after: int) -> Iterator[Point]:
        raise NotImplementedError

    def signals_moved(self, conn: sqlite3.Connection, found: Found) -> list[dict[str, Any]]:
        return []


class IterationFeed(Feed):
    """An iteration log's scores under the active rubric, by iteration number."""

    kind = "iterations"
    _WHERE = "s.source = ? AND s.iteration > ? AND s.rubric_version = ? AND s.scored AND s.value IS NOT NULL"

    def __init__(self, source: str, rubric: str) -> None:
        super().__init__(source)
        self.rubric = rubric
        self._names: dict[str, str] = {}  # signal -> its metric's name

    def has_new(self, conn: sqlite3.Connection, after: int) -> bool:
        return conn.execute(f"SELECT 1 FROM scores s WHERE {self._WHERE} LIMIT 1",
                            (self.source, after, self.rubric)).fetchone() is not None

    def points(self, conn: sqlite3.Connection, after: int) -> Iterator[Point]:
        """Each score and its signals' sub-scores (the ``signals`` column: why, in
        ``store.scores.signals_of``)."""
        while True:
            rows = conn.execute(
                "SELECT s.iteration, s.value, s.signals, i.date, json_extract(r.record, '$.agent.model'),"
                " json_extract(r.record, '$.agent.harness') FROM scores s"
                " JOIN iterations i ON i.source = s.source AND i.iteration = s.iteration"
                " LEFT JOIN record_files r ON r.source = i.source AND r.file = i.file AND r.ordinal = i.ordinal"
                f" WHERE {self._WHERE} ORDER BY s.iteration LIMIT {CHUNK}", (self.source, after, self.rubric)).fetchall()
            if not rows:
                return
            names = self._names
            for it, value, signals, date, model, agent in rows:
                values = {"score": float(value)}
                for signal, sub in json.loads(signals).items():
                    name = names.get(signal)
                    if name is None:
                        name = names[signal] = f"signal:{signal}"
                    values[name] = float(sub)
                yield Point(it, f"iteration {it}", date, "", values, {"rubric": self.rubric, "model": model, "agent": agent})
            after = rows[-1][0]

    def signals_moved(self, conn: sqlite3.Connection, found: Found) -> list[dict[str, Any]]:
        if found.metric != "score" or not found.detection.start_label:
            return []
        lo, hi = found.detection.start_label[1], found.noticed.position
        moved = []
        for signal, mean in conn.execute(
                "SELECT json_extract(b.value, '$.signal'), avg(json_extract(b.value, '$.sub_score'))"
                " FROM scores s JOIN events e ON e.seq = s.seq, json_each(e.payload, '$.breakdown') b"
                " WHERE s.source = ? AND s.rubric_version = ? AND s.iteration BETWEEN ? AND ?"
                " AND json_extract(b.value, '$.present') GROUP BY 1 ORDER BY 1", (self.source, self.rubric, lo, hi)):
            ref = found.reference.get(f"signal:{signal}")
            prior = found.prior.get(f"signal:{signal}")
            if prior is not None and prior[0] >= lo:  # detected itself since the shift began
                ref = (prior[1], prior[2])
            if ref is None or mean is None:
                continue
            size = (mean - ref[0]) / ref[1]
            if abs(size) >= MOVED_SD:
                moved.append({"signal": signal, "before": ref[0], "after": mean, "size_sd": _finite(size)})
        return sorted(moved, key=lambda m: -abs(m["size_sd"]))


class SeqFeed(Feed):
    """A feed of one projection table's rows in event order (``seq``): the first
    column of ``select`` is the row's seq, ``point`` makes a row a point (or None)."""

    table = ""
    select = ""

    def has_new(self, conn: sqlite3.Connection, after: int) -> bool:
        return conn.execute(f"SELECT 1 FROM {self.table} WHERE source = ? AND seq > ? LIMIT 1",
                            (self.source, after)).fetchone() is not None

    def points(self, conn: sqlite3.Connection, after: int) -> Iterator[Point]:
        while True:
            rows = conn.execute(f"{self.select} WHERE x.source = ? AND x.seq > ? ORDER BY x.seq LIMIT {CHUNK}",
                                (self.source, after)).fetchall()
            if not rows:
                return
            yield from filter(None, map(self.point, rows))
            after = rows[-1][0]

    def point(self, row: tuple) -> Point | None:
        raise NotImplementedError


class TrialFeed(SeqFeed):
    """A vally source's trials, in the order they were recorded; one stream per eval."""

    kind = "trials"
    binary = True
    table = "trials"
    select = ("SELECT x.seq, x.eval_name, x.passed, x.run_id, x.stimulus, x.model, x.variant,"
              " json_extract(r.summary, '$.configHash'), e.recorded_at FROM trials x JOIN events e ON e.seq = x.seq"
              " LEFT JOIN runs r ON r.source = x.source AND r.run_dir = x.run_dir")

    def point(self, row: tuple) -> Point | None:
        seq, eval_name, passed, run, stimulus, model, variant, config, at = row
        return Point(seq, f"run {run} · {stimulus}", at, eval_name, {"pass_rate": float(passed)},
                     {"model": model, "variant": variant, "configuration": config})


class AnnotationFeed(SeqFeed):
    """An annotation source's trajectories, in the order they were recorded: solved
    (a score of 1, or 100 %) or not."""

    kind = "annotations"
    binary = True
    table = "trajectories"
    select = ("SELECT x.seq, x.path, coalesce(x.score_norm, x.score), x.task_group, x.format_version,"
              " e.recorded_at FROM trajectories x JOIN events e ON e.seq = x.seq")

    def point(self, row: tuple) -> Point | None:
        seq, path, score, group, fmt, at = row
        if not isinstance(score, (int, float)):
            return None
        return Point(seq, f"annotation {path}", at, "", {"solved": float(score >= 1.0)},
                     {"task group": group, "format": fmt})


def _finite(x: float) -> float:
    return x if abs(x) < 1e300 else (1e300 if x > 0 else -1e300)


class Regressions:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def feeds(self) -> list[Feed]:
        ctx = self.ctx
        out: list[Feed] = []
        if ctx.state("backfill") is None:  # under way: the active rubric's stream is not whole yet
            out += [IterationFeed(s.id, ctx.rubric.version) for s in ctx.cfg.iteration_logs]
        out += [TrialFeed(s) for (s,) in ctx.conn.execute("SELECT DISTINCT source FROM runs ORDER BY 1")]
        out += [AnnotationFeed(a.id) for a in ctx.cfg.annotations]
        return out

    def run(self) -> Outcome:
        """Feed every stream what is new; the detections are committed, logged and
        handed to the configured command."""
        ctx, report = self.ctx, Outcome()
        if not ctx.cfg.detect.enabled:
            return report
        new: list[Event] = []
        for feed in self.feeds():
            saved = load_checkpoint(ctx.conn, feed.name)
            if not feed.has_new(ctx.conn, saved[0] if saved else -1):
                continue  # the common case costs one indexed probe, and no write lock
            with transaction(ctx) as batch:
                saved = load_checkpoint(ctx.conn, feed.name)  # again, under the lock: another process may have read it
                position = saved[0] if saved else -1
                state = FeedState(saved[1] if saved else None, feed.binary)
                found, last = [], position
                for point in feed.points(ctx.conn, position):
                    found += state.add(point)
                    last = point.position
                if last != position:
                    events = [self._event(feed, f) for f in found]
                    new += record(batch, events, report, feed.name,
                                  checkpoint=DetectorCheckpoint(feed.name, last, state.dump()))
        report.detections += len(new)
        for ev in new:
            self._tell(ev)
        return report

    def _event(self, feed: Feed, f: Found) -> Event:
        d, p = f.detection, f.noticed
        start = d.start_label or [None, p.position, p.label, p.at]
        payload = {
            "feed": feed.kind, "scope": f.scope, "metric": f.metric, "direction": d.direction,
            "began": {"position": start[1], "label": start[2], "at": start[3]},
            "noticed": {"position": p.position, "label": p.label, "at": p.at},
            "points": d.index - d.start + 1, "before": d.before, "after": d.after, "size_sd": _finite(d.size_sd),
            "rubric": getattr(feed, "rubric", None),
            "signals": feed.signals_moved(self.ctx.conn, f), "changed": f.changed,
        }
        return Event(TYPES[d.direction], f"{feed.source}:detections", feed.source,
                     f"detect|{feed.name}|{f.scope}|{f.metric}|{p.position}|{start[1]}|{payload['rubric']}", payload)

    def _tell(self, ev: Event) -> None:
        from ..analysis.detections import shown, stream, what_changed

        p = ev.payload
        row = {"feed": p["feed"], "source": ev.source, "scope": p["scope"], "metric": p["metric"],
               "changed": p["changed"]}
        what = what_changed(row)  # data (a model name, a path) escaped: it forges no log line
        moved = ", ".join(shown(s["signal"]) for s in p["signals"])
        (log.warning if ev.type == "regression.detected" else log.info)(
            "%s: %s %.3f → %.3f (%+.1f SD) since %s, noticed at %s%s%s", ev.type.split(".")[0], stream(row),
            p["before"], p["after"], p["size_sd"], shown(p["began"]["label"]), shown(p["noticed"]["label"]),
            f"; signals: {moved}" if moved else "", f"; changed: {what}" if what else "")
        command = self.ctx.cfg.detect.command
        if command:
            from ..process.command import run_with_input

            document = {"type": ev.type, "seq": ev.seq, "source": ev.source, "recorded_at": ev.recorded_at, **p}
            problem = run_with_input(command, json.dumps(document).encode(), self.ctx.cfg.detect.timeout_seconds)
            if problem:
                log.error("[detect] command: %s", problem)
