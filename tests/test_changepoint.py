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
