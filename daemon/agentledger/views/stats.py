"""The few statistics the report draws, written out so the numbers in a chart's
tooltip can be checked by hand: quantiles interpolate linearly between order
statistics (numpy's default, "type 7"), the rolling window trails (a point
summarises the iterations up to and including it, never later ones), and a pass
rate's interval is Wilson's, which stays inside [0, 1] and does not collapse to a
point at 0/n or n/n the way the textbook normal interval does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054  # two-sided 95 %


def quantile(ordered: Sequence[float], q: float) -> float:
    """``q`` in [0, 1] of an already sorted, non-empty sequence."""
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Five numbers and a mean of one group of scores (a session, a bin)."""
    n: int
    low: float
    q1: float
    median: float
    q3: float
    high: float
    mean: float


def summary(values: Sequence[float]) -> Summary:
    s = sorted(values)
    return Summary(len(s), s[0], quantile(s, 0.25), quantile(s, 0.5), quantile(s, 0.75), s[-1], sum(s) / len(s))


def rolling_window(n: int) -> int:
    """Iterations per rolling point: about a twenty-fifth of the history, so the line
    keeps the same smoothness at 60 iterations as at 10,000 (at least 5, at most 500)."""
    return max(5, min(500, n // 25))


@dataclass(frozen=True)
class RollingPoint:
    index: int  # the window's last position in the series
    mean: float
    p10: float
    p90: float


def rolling(values: Sequence[float], window: int, samples: int = 400) -> list[RollingPoint]:
    """Trailing mean and 10th/90th percentiles at about ``samples`` evenly spaced
    positions (always the last one), each over up to ``window`` values."""
    n = len(values)
    if n == 0:
        return []
    step = max(1, math.ceil(n / samples))
    positions = list(range(step - 1, n, step))
    if positions[-1] != n - 1:
        positions.append(n - 1)
    out = []
    for k in positions:
        chunk = sorted(values[max(0, k - window + 1):k + 1])
        out.append(RollingPoint(k, sum(chunk) / len(chunk), quantile(chunk, 0.1), quantile(chunk, 0.9)))
    return out


def wilson(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion; (0, 1) when there is nothing to go on."""
    if n <= 0:
        return 0.0, 1.0
    p = passed / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def bins(n: int, target: int = 40, smallest: int = 5) -> list[tuple[int, int]]:
    """[start, end) index ranges cutting a series of ``n`` into about ``target``
    equal consecutive groups of at least ``smallest`` (the last may be shorter)."""
    if n <= 0:
        return []
    size = max(smallest, math.ceil(n / target))
    return [(i, min(i + size, n)) for i in range(0, n, size)]
