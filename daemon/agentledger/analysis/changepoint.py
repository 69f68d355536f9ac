"""Online change-point detection for a score stream: a sustained shift of the mean,
up or down, noticed while it happens.

Two two-sided CUSUM charts on the standardised stream run side by side: one tuned to a
shift of 1 standard deviation (reference k = 0.5, threshold 8), one to half that (k =
0.25, threshold 16); either crossing its threshold is a detection. The reference mean
and standard deviation are estimated from the stream itself: from the first
``WARMUP`` observations after a start or a detection, refined until ``REFERENCE``
observations, then fixed. A detection names where the shift began (the last point its
chart stood at zero, the classical CUSUM estimate), its size (the mean since then
against the reference, also in standard deviations) and its direction, and restarts
the reference from the points after the change. ``bench/bench_detect.py`` prints
detection rate, delay and false alarms on generated streams against the issue's
targets; those targets pull against each other (docs/performance.md).

Pure: no I/O, O(1) time and memory a point, deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CHARTS = ((0.5, 8.0), (0.25, 16.0))  # (k, h) in standard deviations
WARMUP = 100
REFERENCE = 5000
MIN_SD = 1e-6  # a constant stream has no spread to standardise by: any move is a change


@dataclass(frozen=True)
class Detection:
    index: int  # the point at which it was noticed
    start: int  # where the shift began (its first point)
    direction: str  # "up" | "down"
    before: float  # the reference mean
    after: float  # the mean from ``start`` to ``index``
    size_sd: float  # (after - before) / reference SD


@dataclass
class Detector:
    charts: tuple[tuple[float, float], ...] = CHARTS
    _n: int = 0  # points seen
    _ref_n: int = 0
    _mean: float = 0.0
    _m2: float = 0.0
    _up: list[float] = field(default_factory=list)
    _down: list[float] = field(default_factory=list)
    # per chart: (last index it stood at zero, and the count, sum and sum of squares of
    # the points since): where a shift began and its mean, in O(1) memory a stream
    _up_run: list[list] = field(default_factory=list)
    _down_run: list[list] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._reset(0, 0, 0.0, 0.0)

    def _reset(self, at: int, n: int, mean: float, m2: float) -> None:
        """A new reference: ``n`` points already learnt (the ones after a change)."""
        self._ref_n, self._mean, self._m2 = n, mean, m2
        self._up = [0.0] * len(self.charts)
        self._down = [0.0] * len(self.charts)
        self._up_run = [[at - 1, 0, 0.0, 0.0] for _ in self.charts]
        self._down_run = [[at - 1, 0, 0.0, 0.0] for _ in self.charts]

    def _learn(self, x: float) -> None:
        self._ref_n += 1
        d = x - self._mean
        self._mean += d / self._ref_n
        self._m2 += d * (x - self._mean)

    @property
    def sd(self) -> float:
        return max(math.sqrt(self._m2 / (self._ref_n - 1)), MIN_SD) if self._ref_n > 1 else MIN_SD

    def add(self, x: float) -> Detection | None:
        """Feed one point; a ``Detection`` when a sustained shift is noticed at it."""
        i = self._n
        self._n += 1
        for run in (*self._up_run, *self._down_run):
            run[1] += 1
            run[2] += x
            run[3] += x * x
        if self._ref_n < WARMUP:
            self._learn(x)
            return None
        z = (x - self._mean) / self.sd
        hit = None
        for c, (k, h) in enumerate(self.charts):
            self._up[c] = max(0.0, self._up[c] + z - k)
            self._down[c] = max(0.0, self._down[c] - z - k)
            for value, run in ((self._up[c], self._up_run[c]), (self._down[c], self._down_run[c])):
                if value == 0.0:
                    run[:] = [i, 0, 0.0, 0.0]
            if hit is None and self._up[c] > h:
                hit = ("up", self._up_run[c])
            elif hit is None and self._down[c] > h:
                hit = ("down", self._down_run[c])
        if hit is None:
            if self._ref_n < REFERENCE:
                self._learn(x)
            return None
        direction, (zero, n, total, squares) = hit
        after = total / n
        detection = Detection(i, zero + 1, direction, self._mean, after, (after - self._mean) / self.sd)
        self._reset(i + 1, n, after, max(squares - total * total / n, 0.0))
        return detection
