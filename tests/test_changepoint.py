"""The change-point detector on planted shifts: found, dated, sized, and quiet on a
stationary stream (the rates are bench/bench_detect.py's; these are single cases)."""

from __future__ import annotations

import random

import pytest
from agentledger.analysis.changepoint import Detector


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
