"""Change-point detection on generated streams (issue #24). Prints figures; asserts nothing.

    python bench/bench_detect.py [--streams 1000] [--null-streams 50] [--seed 1]

Streams of Gaussian scores (mean 0.6, SD 0.1) with a planted drop after 300 stationary
points, fed one point at a time to ``agentledger.analysis.changepoint.Detector`` (which
estimates the mean and SD itself):

* a 1-SD drop: share detected within 200 points, median delay (target ≥ 99 %, ≤ 15);
* a 0.5-SD drop: share detected within 100 points (target ≥ 95 %);
* false alarms: detections per 10,000 points of a stationary stream (target ≤ 1), over
  ``--null-streams`` streams of 10,000 points, and before the planted drops.

Then pass/fail streams (the trial and annotation feeds: ``Detector(binary=True)``) at
pass rates of 50, 80 and 97 %: false alarms per 10,000 and a 1-SD drop's detection
rate and median delay. Last, a skewed signal stream (mostly 1): what a z chart makes of
it, and what the detector makes of it when it decides the kind of stream itself.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from agentledger.analysis.changepoint import Detector

PRE = 300


def delays(n: int, drop_sd: float, horizon: int, seed: int) -> tuple[list[int | None], int]:
    """For each stream, the delay of the first detection after the drop (None: none
    within ``horizon``); and the detections before the drop (false alarms)."""
    out, early = [], 0
    for s in range(n):
        r = random.Random(seed * 1_000_003 + s)
        d, found = Detector(), None
        for i in range(PRE + horizon):
            hit = d.add(r.gauss(0.6, 0.1) - (drop_sd * 0.1 if i >= PRE else 0.0))
            if hit is not None:
                if i < PRE:
                    early += 1
                elif found is None:
                    found = i - PRE + 1
                    break
        out.append(found)
    return out, early


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--null-streams", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t = time.perf_counter()
    for drop, horizon, within, target in ((1.0, 200, None, "≥ 99 % detected, median delay ≤ 15"),
                                          (0.5, 300, 100, "≥ 95 % within 100")):
        ds, early = delays(args.streams, drop, horizon, args.seed)
        found = [x for x in ds if x is not None]
        share = len(found) / len(ds)
        inside = sum(1 for x in found if within is None or x <= within) / len(ds)
        print(f"{drop:g}-SD drop, {len(ds)} streams: detected {share * 100:.1f} % within {horizon}"
              + (f", {inside * 100:.1f} % within {within}" if within else "")
              + f"; delay median {statistics.median(found) if found else '-'}, p90"
              f" {statistics.quantiles(found, n=10)[-1] if len(found) > 1 else '-'}; false alarms before it:"
              f" {early} in {len(ds) * PRE:,} points   (target: {target})")
    alarms = 0
    for s in range(args.null_streams):
        r = random.Random(args.seed * 7_000_001 + s)
        d = Detector()
        alarms += sum(1 for _ in range(10_000) if d.add(r.gauss(0.6, 0.1)) is not None)
    print(f"stationary: {alarms} detections in {args.null_streams * 10_000:,} points ="
          f" {alarms / args.null_streams:.2f} per 10,000   (target: ≤ 1)")
    for p in (0.5, 0.8, 0.97):
        alarms = 0
        for s in range(args.null_streams):
            r = random.Random(args.seed * 9_000_011 + s)
            d = Detector(binary=True)
            alarms += sum(1 for _ in range(10_000) if d.add(float(r.random() < p)) is not None)
        drop = (p * (1 - p)) ** 0.5
        found = []
        for s in range(args.streams):
            r = random.Random(args.seed * 3_000_017 + s)
            d = Detector(binary=True)
            for i in range(PRE + 300):
                hit = d.add(float(r.random() < (p - drop if i >= PRE else p)))
                if hit is not None and i >= PRE:
                    found.append(i - PRE + 1)
                    break
        print(f"pass/fail at {p * 100:.0f} %: {alarms / args.null_streams:.2f} false alarms per 10,000; a 1-SD drop"
              f" (to {(p - drop) * 100:.0f} %) detected in {len(found) / args.streams * 100:.1f} % of"
              f" {args.streams} streams within 300, median delay {statistics.median(found) if found else '-'}")
    for binary, name in ((False, "as numbers (z charts)"), (None, "deciding for itself (binary=None)")):
        alarms = 0
        for s in range(args.null_streams):
            r = random.Random(args.seed * 5_000_011 + s)
            d = Detector(binary=binary)
            alarms += sum(1 for _ in range(10_000) if d.add(_skewed(r)) is not None)
        print(f"a signal that is 1 but for the odd 0 or 0.5 (95/3/2 %), {name}:"
              f" {alarms / args.null_streams:.2f} false alarms per 10,000")
    print(f"({time.perf_counter() - t:.1f} s)")


def _skewed(r: random.Random) -> float:
    u = r.random()
    return 1.0 if u < 0.95 else 0.0 if u < 0.98 else 0.5


if __name__ == "__main__":
    main()
