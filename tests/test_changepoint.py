"""The change-point detector on planted shifts: found, dated, sized, and quiet on a
stationary stream (the rates are bench/bench_detect.py's; these are single cases)."""

from __future__ import annotations

import math
import random

import pytest
from agentledger.analysis.changepoint import BINARY_H, CHARTS, CLIP, MIN_SD, REFERENCE, WARMUP, Detection, Detector
from hypothesis import given, settings
from hypothesis import strategies as st


def _stream(seed: int, n: int, at: int | None, shift_sd: float) -> list[float]:
    r = random.Random(seed)
    return [r.gauss(0.6, 0.1) + (shift_sd * 0.1 if at is not None and i >= at else 0.0) for i in range(n)]


@pytest.mark.parametrize("shift, direction", [(-1.0, "down"), (1.0, "up")])
def test_a_one_sd_shift_is_found_near_where_it_began(shift: float, direction: str) -> None:
    found = []
    for seed in range(20):
        d = Detector()
        hits = [h for x in _stream(seed, 800, 500, shift) if (h := d.add(x)) is not None]
        late = [h for h in hits if h.index >= 500]
        assert late, f"seed {seed}: not found"
        found.append(late[0])
    assert all(h.direction == direction for h in found)
    assert sum(abs(h.start - 500) <= 15 for h in found) >= 16  # the CUSUM's estimate of the start
    assert sorted(h.index - 500 for h in found)[10] <= 20  # median delay
    assert all(abs(h.size_sd - shift) < 0.8 for h in found)


def test_a_stationary_stream_is_quiet_and_a_constant_one_moves_at_once() -> None:
    alarms = sum(1 for seed in range(5) for d in [Detector()] for x in _stream(100 + seed, 4000, None, 0)
                 if d.add(x) is not None)
    assert alarms <= 3  # 20,000 points: about 3 false alarms expected at most (bench: 1–1.6 per 10,000)
    d = Detector()
    assert all(d.add(0.7) is None for _ in range(200))
    hit = next(h for x in [0.7] * 10 + [0.6] * 10 if (h := d.add(x)) is not None)
    assert hit.direction == "down" and hit.start == 210


def test_pass_fail_streams_are_judged_by_their_likelihood_not_a_z_score() -> None:
    """At a 97 % pass rate one failure is a z of −5.7: a z chart would call three
    close failures a regression. The pass/fail charts stay quiet on 50,000 stationary
    trials at 97 % and at 60 %, and find a drop of 1 SD."""
    for p in (0.97, 0.6):
        r = random.Random(int(p * 100))
        d = Detector(binary=True)
        alarms = sum(1 for _ in range(50_000) if d.add(float(r.random() < p)) is not None)
        assert alarms <= 15, (p, alarms)  # bench: 0.1–1.2 per 10,000
        z = Detector()
        assert sum(1 for _ in range(50_000) if z.add(float(r.random() < p)) is not None) > alarms
    found = 0
    for seed in range(20):
        r, d = random.Random(seed), Detector(binary=True)
        hits = [h for i in range(600) if (h := d.add(float(r.random() < (0.8 if i < 300 else 0.4)))) is not None]
        found += any(h.index >= 300 and h.direction == "down" for h in hits)
    assert found >= 19


@pytest.mark.parametrize("binary", [False, True])
def test_a_detector_carried_across_processes_says_what_one_that_never_stopped_says(binary: bool) -> None:
    import json

    r = random.Random(5)
    xs = [float(r.random() < (0.7 if i < 1500 else 0.3)) if binary else r.gauss(0.6 if i < 1500 else 0.5, 0.1)
          for i in range(3000)]
    whole = Detector(binary=binary)
    want = [(h, i) for i, x in enumerate(xs) if (h := whole.add(x, i)) is not None]
    got, d = [], Detector(binary=binary)
    for i, x in enumerate(xs):
        if i % 97 == 0:
            d = Detector.restore(json.loads(json.dumps(d.state())))
        if (h := d.add(x, i)) is not None:
            got.append((h, i))
    assert got == want and want
    assert all(h.start_label == h.start for h, _ in want)  # the label handed in with the first point of the shift


def test_a_signal_that_is_1_but_for_the_odd_0_is_judged_as_pass_fail() -> None:
    """Real signals are mostly 1 (landed, scope): as numbers, the odd 0 is a z of −4 and
    three close ones look like a regression. Left to decide, the detector sees a
    pass/fail stream and stays quiet; it still judges a stream of numbers by z."""
    def skewed(r: random.Random) -> float:
        u = r.random()
        return 1.0 if u < 0.95 else 0.0 if u < 0.98 else 0.5

    r = random.Random(11)
    xs = [skewed(r) for _ in range(50_000)]
    auto, z = Detector(binary=None), Detector()
    assert sum(auto.add(x) is not None for x in xs) <= 10 < sum(z.add(x) is not None for x in xs)
    assert auto.binary is True
    numbers = Detector(binary=None)
    for x in _stream(1, 200, None, 0):
        numbers.add(x)
    assert numbers.binary is False


class _Before(Detector):
    """The detector as it was before its runs were updated only where a chart stands above
    zero and its ``sd`` was kept (``add`` and ``sd`` as at 5faa116, verbatim): the oracle of
    ``test_the_detector_says_what_it_said_before``."""

    @property
    def sd(self) -> float:
        return max(math.sqrt(self._m2 / (self._ref_n - 1)), MIN_SD) if self._ref_n > 1 else MIN_SD

    def add(self, x: float, label=None):
        i = self._n
        self._n = i + 1
        xx = x * x
        for runs in (self._up_run, self._down_run):
            for run in runs:
                if not run[2]:
                    run[1] = label
                run[2] += 1
                run[3] += x
                run[4] += xx
        if self._ref_n < WARMUP:
            self._learn(x)
            if self.binary is None:
                self._lo = x if self._lo is None else min(self._lo, x)
                self._hi = x if self._hi is None else max(self._hi, x)
                if self._ref_n == WARMUP:
                    self._decide()
            return None
        hit = None
        ups, downs = self._up, self._down
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
            if u == 0.0:
                self._up_run[c][:] = [i, None, 0, 0.0, 0.0]
            if d == 0.0:
                self._down_run[c][:] = [i, None, 0, 0.0, 0.0]
            if hit is None:
                if u > h:
                    hit = ("up", self._up_run[c])
                elif d > h:
                    hit = ("down", self._down_run[c])
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


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([False, True, None]), st.integers(150, 700),
       st.floats(-3.0, 3.0), st.floats(0.0, 0.05))
def test_the_detector_says_what_it_said_before(seed: int, binary, n: int, shift: float, nan_rate: float) -> None:
    """Each point's detection and the state after it (``state()``: every chart's sums and
    runs, the reference) are those of the detector before (``_Before``), NaNs, a shift and
    pass/fail streams included: a chart at zero now resets its run without adding the point
    to it first, and ``sd`` is kept while the reference stands; neither moves a number."""
    r = random.Random(seed)
    at = r.randrange(100, n)
    if binary is False:
        xs = [r.gauss(0.6, 0.1) + (shift * 0.1 if i >= at else 0.0) for i in range(n)]
    else:
        xs = [float(r.random() < min(max(0.7 + (shift * 0.1 if i >= at else 0.0), 0.0), 1.0)) for i in range(n)]
    xs = [math.nan if r.random() < nan_rate else x for x in xs]
    fast, before = Detector(binary=binary), _Before(binary=binary)
    for i, x in enumerate(xs):
        assert fast.add(x, i) == before.add(x, i), i
        assert _same(fast.state(), before.state()), i
        assert _same(fast.sd, before.sd), i


def _same(a, b) -> bool:
    """Equal, a NaN equal to a NaN (a NaN point can leave one in a run's sums)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
