"""Online change-point detection for a score stream: a sustained shift of the mean,
up or down, noticed while it happens.

Two two-sided CUSUM charts run side by side, one tuned to a shift of 1 standard
deviation, one to half that; either crossing its threshold is a detection. A stream of
numbers is standardised by a mean and SD the detector learns itself (charts k = 0.5,
h = 8 and k = 0.25, h = 18 on z-scores). A stream of pass/fail (``binary``) is not
standardised: one failure at a 97 % pass rate is a z of −5.7 and would trip a z chart
within three failures, so its charts add the Bernoulli log-likelihood ratio of the
learnt rate against the rate shifted by 1 and 0.5 SD (threshold ``BINARY_H``, which
keeps false alarms near 1 in 10,000 from a 50 % to a 97 % pass rate); a value between
0 and 1 counts as that share of a pass (partial credit). ``binary=None`` decides at the
end of the warm-up: a stream inside [0, 1] whose spread is nearly that of a pass/fail
stream of its mean (a signal that is 1 but for the odd 0 or 0.5) is judged as one.

The reference is learnt from the first ``WARMUP`` observations after a start or a
detection, refined until ``REFERENCE`` observations, then fixed. A detection names
where the shift began (the last point its chart stood at zero, the classical CUSUM
estimate), its size (the mean since then against the reference, also in standard
deviations) and its direction, and restarts the reference from the points after the
change. ``bench/bench_detect.py`` prints detection rate, delay and false alarms on
generated streams against the issue's targets; those targets pull against each other
(docs/performance.md).

Pure: no I/O, O(1) time and memory a point, deterministic; ``state()`` and
``Detector.restore`` carry it across processes (the ledger keeps it beside the
position it has read to).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

CHARTS = ((0.5, 8.0), (0.25, 18.0))  # (k, h) in standard deviations
BINARY_SHIFTS = (1.0, 0.5)  # the alternatives of the pass/fail charts, in SDs of the learnt rate
BINARY_H = 9.5
NEAR_BINARY = 0.8  # SD / sqrt(mean · (1 − mean)) from which a [0, 1] stream counts as pass/fail
WARMUP = 100
REFERENCE = 5000
MIN_SD = 1e-6  # a constant stream has no spread to standardise by: any move is a change
CLIP = 4.0  # |z| beyond this counts as this: one wild point is not a sustained shift


@dataclass(frozen=True)
class Detection:
    index: int  # the point at which it was noticed
    start: int  # where the shift began (its first point)
    start_label: Any  # the label the caller gave that point (None: none given)
    direction: str  # "up" | "down"
    before: float  # the reference mean
    after: float  # the mean from ``start`` to ``index``
    size_sd: float  # (after - before) / reference SD


@dataclass
class Detector:
    binary: bool | None = False  # None: decide at the end of the warm-up
    _n: int = 0  # points seen
    _ref_n: int = 0
    _mean: float = 0.0
    _m2: float = 0.0
    # per chart: the up and down sums, and for each (the last index it stood at zero, the
    # label of the point after it, and the count, sum and sum of squares of the points
    # since): where a shift began and its mean, in O(1) memory a stream
    _up: list[float] = field(default_factory=list)
    _down: list[float] = field(default_factory=list)
    _up_run: list[list] = field(default_factory=list)
    _down_run: list[list] = field(default_factory=list)
    _lo: float | None = None  # the warm-up's smallest and largest values (for binary=None)
    _hi: float | None = None
    # the binary charts' log-likelihood ratios and the (mean, count) they were made for
    _logs: list = field(default_factory=list, repr=False, compare=False)
    _logs_for: tuple | None = field(default=None, repr=False, compare=False)
    _sd: float | None = field(default=None, repr=False, compare=False)  # ``sd`` until the reference moves

    def __post_init__(self) -> None:
        if not self._up:
            self._reset(0, 0, 0.0, 0.0)

    def state(self) -> dict[str, Any]:
        return {"binary": self.binary, "n": self._n, "ref_n": self._ref_n, "mean": self._mean, "m2": self._m2,
                "up": self._up, "down": self._down, "up_run": self._up_run, "down_run": self._down_run,
                "lo": self._lo, "hi": self._hi}

    @classmethod
    def restore(cls, s: dict[str, Any]) -> Detector:
        return cls(None if s["binary"] is None else bool(s["binary"]), int(s["n"]), int(s["ref_n"]),
                   float(s["mean"]), float(s["m2"]), [float(v) for v in s["up"]], [float(v) for v in s["down"]],
                   [list(r) for r in s["up_run"]], [list(r) for r in s["down_run"]], s.get("lo"), s.get("hi"))

    def _reset(self, at: int, n: int, mean: float, m2: float) -> None:
        """A new reference: ``n`` points already learnt (the ones after a change)."""
        self._ref_n, self._mean, self._m2, self._sd = n, mean, m2, None
        charts = len(BINARY_SHIFTS if self.binary else CHARTS)
        self._up = [0.0] * charts
        self._down = [0.0] * charts
        self._up_run = [[at - 1, None, 0, 0.0, 0.0] for _ in range(charts)]
        self._down_run = [[at - 1, None, 0, 0.0, 0.0] for _ in range(charts)]

    def _decide(self) -> None:
        m, lo, hi = self._mean, self._lo, self._hi
        spread = math.sqrt(max(m * (1 - m), 0.0))
        self.binary = lo is not None and hi is not None and lo >= 0.0 and hi <= 1.0 and (
            spread < 1e-9 or self.sd >= NEAR_BINARY * spread)

    def _learn(self, x: float) -> None:
        self._ref_n += 1
        d = x - self._mean
        self._mean += d / self._ref_n
        self._m2 += d * (x - self._mean)
        self._sd = None

    @property
    def mean(self) -> float:
        return self._mean

    @property
    def sd(self) -> float:
        """Asked twice a point (the caller keeps each metric's reference), and fixed once the
        reference is (after ``REFERENCE`` points): kept until it moves."""
        sd = self._sd
        if sd is None:
            sd = self._sd = max(math.sqrt(self._m2 / (self._ref_n - 1)), MIN_SD) if self._ref_n > 1 else MIN_SD
        return sd

    def _binary_logs(self) -> list[tuple[float, float, float, float]]:
        """For each shift, the four log-likelihood ratios a pass/fail point adds (up if it
        passes, up if it fails, down if it passes, down if it fails): they change only when
        the reference does, so they are kept for the reference they were made for."""
        key = (self._mean, self._ref_n)
        if self._logs_for != key:
            n = self._ref_n
            p0 = min(max(self._mean, 0.5 / n), 1 - 0.5 / n)  # never certain: a first failure is news, not infinity
            sd = math.sqrt(p0 * (1 - p0))
            logs = []
            for shift in BINARY_SHIFTS:
                up, down = min(p0 + shift * sd, 0.999), max(p0 - shift * sd, 0.001)
                logs.append((math.log(up / p0), math.log((1 - up) / (1 - p0)),
                             math.log(down / p0), math.log((1 - down) / (1 - p0))))
            self._logs, self._logs_for = logs, key
        return self._logs

    def add(self, x: float, label: Any = None) -> Detection | None:
        """Feed one point (``label``: how the caller names it, JSON-able, handed back as
        a detection's ``start_label``); a ``Detection`` when a sustained shift is
        noticed at it. Each chart adds an up and a down increment for ``x`` (a z-score's,
        or a pass/fail point's log-likelihood ratios) and compares its sums with its
        threshold. Written out for speed: a pass of 10,000 iterations feeds ~63,000 points
        while the scoring workers wait on the committing process (a NaN ``x`` stays NaN
        through the clipping, as through ``min(max(...))``)."""
        i = self._n
        self._n = i + 1
        xx = x * x
        if self._ref_n < WARMUP:
            for runs in (self._up_run, self._down_run):
                for run in runs:
                    _join(run, label, x, xx)
            self._learn(x)
            if self.binary is None:
                self._lo = x if self._lo is None else min(self._lo, x)
                self._hi = x if self._hi is None else max(self._hi, x)
                if self._ref_n == WARMUP:
                    self._decide()
            return None
        hit = None
        ups, downs, up_runs, down_runs = self._up, self._down, self._up_run, self._down_run
        if self.binary:
            v = 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)  # min(max(x, 0.0), 1.0)
            w = 1 - v
            steps = [(v * a + w * b, v * c + w * d, BINARY_H) for a, b, c, d in self._binary_logs()]
        else:
            z = (x - self._mean) / self.sd
            z = -CLIP if z < -CLIP else (CLIP if z > CLIP else z)  # min(max(z, -CLIP), CLIP), NaN kept
            steps = [(z - k, -z - k, h) for k, h in CHARTS]
        c = 0
        for up, down, h in steps:
            u = ups[c] + up
            d = downs[c] + down
            u = ups[c] = u if u > 0.0 else 0.0  # max(0.0, u), NaN and -0.0 included
            d = downs[c] = d if d > 0.0 else 0.0
            # a chart at zero starts its run again after this point; else the point joins it
            if u == 0.0:
                up_runs[c][:] = i, None, 0, 0.0, 0.0
            else:
                _join(up_runs[c], label, x, xx)
            if d == 0.0:
                down_runs[c][:] = i, None, 0, 0.0, 0.0
            else:
                _join(down_runs[c], label, x, xx)
            if hit is None:
                if u > h:
                    hit = ("up", up_runs[c])
                elif d > h:
                    hit = ("down", down_runs[c])
            c += 1
        if hit is None:
            if self._ref_n < REFERENCE:
                self._learn(x)
            return None
        direction, (zero, start_label, n, total, squares) = hit
        after = total / n
        detection = Detection(i, zero + 1, start_label, direction, self._mean, after,
                              (after - self._mean) / self.sd)
        self._reset(i + 1, n, after, max(squares - total * total / n, 0.0))
        return detection


def _join(run: list, label: Any, x: float, xx: float) -> None:
    """A point joins a chart's run: [the index the chart last stood at zero, the label of
    the point after it, the count, sum and sum of squares of the points since]."""
    if not run[2]:
        run[1] = label
    run[2] += 1
    run[3] += x
    run[4] += xx
