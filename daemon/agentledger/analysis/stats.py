"""The statistics behind ``agentledger compare``: for one metric of two cohorts, the
difference, its 95 % interval, a p-value from the test that fits the data, and the
smallest difference the data could have detected.

Which test: paired units (the same iteration under two rubrics, the same stimulus
under two variants) are compared pair by pair: McNemar's exact test for pass/fail,
otherwise a sign-flip permutation test of the mean difference; independent cohorts by
Fisher's exact test for pass/fail and a permutation test of the difference of means
otherwise. The permutation tests test the very difference that is reported (a
rank test such as Wilcoxon's asks about the median shift, and can call a shift of the
mean whose interval excludes zero "no change"). Intervals are percentile bootstraps
of the same difference. From 500 units a side the resampling is replaced by what it
converges to (a z test of the mean difference with the Welch standard error, and the
normal interval): the same answer in O(n). Everything random is drawn from a
generator seeded by the caller, so the same data gives the same answer. scipy is
imported here only (never on the close-task hook's path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z_975 = 1.959963984540054  # two-sided 5 %
Z_80 = 0.8416212335729143  # 80 % power
# From this many units a side, the permutation and bootstrap distributions of a mean
# difference are normal to well within their own resampling noise: the z test and the
# normal interval give the same answer in O(n) instead of O(n × resamples).
LARGE = 500


@dataclass(frozen=True)
class Difference:
    test: str
    n_a: int
    n_b: int
    value_a: float
    value_b: float
    delta: float  # b - a
    ci_low: float
    ci_high: float
    p: float
    mde: float  # the smallest |delta| detectable with 80 % power at 5 % (two-sided)


def difference(a: list[float], b: list[float], *, binary: bool, paired: bool, seed: int,
               resamples: int = 2000) -> Difference:
    """``b`` against ``a``. Paired: ``a[i]`` and ``b[i]`` are one unit's two values."""
    import numpy as np

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired and len(x) != len(y):
        raise ValueError("paired samples differ in length")
    rng = np.random.default_rng(seed)
    large = min(len(x), len(y)) >= LARGE
    if paired:
        d = y - x
        sd = float(np.std(d, ddof=1)) if len(d) > 1 else math.nan
        se = sd / math.sqrt(len(d)) if len(d) > 1 else math.nan
        if binary:
            p, test = _mcnemar(x, y), "McNemar exact"
        elif large:
            p, test = _normal_p(float(d.mean()), se), "paired z (n ≥ 500)"
        else:
            p, test = _permutation(x, y, rng, max(resamples, 2000), paired=True), "permutation (paired, sign-flip)"
        low, high = _normal_ci(float(d.mean()), se) if large else _bootstrap_paired(d, rng, resamples)
    else:
        va = float(np.var(x, ddof=1)) if len(x) > 1 else math.nan
        vb = float(np.var(y, ddof=1)) if len(y) > 1 else math.nan
        se = math.sqrt(va / len(x) + vb / len(y)) if len(x) > 1 and len(y) > 1 else math.nan
        delta = float(y.mean() - x.mean()) if len(x) and len(y) else math.nan
        if binary:
            p, test = _fisher(x, y), "Fisher exact"
        elif large:
            p, test = _normal_p(delta, se), "Welch z (n ≥ 500)"
        else:
            p, test = _permutation(x, y, rng, max(resamples, 2000), paired=False), "permutation (difference of means)"
        low, high = _normal_ci(delta, se) if large else _bootstrap_independent(x, y, rng, resamples)
    mde = (Z_975 + Z_80) * se
    mean_a = float(x.mean()) if len(x) else math.nan
    mean_b = float(y.mean()) if len(y) else math.nan
    return Difference(test, len(x), len(y), mean_a, mean_b, mean_b - mean_a, low, high, p, mde)


def _normal_p(delta: float, se: float) -> float:
    from scipy.stats import norm

    if not math.isfinite(se):
        return math.nan
    if se == 0:
        return 1.0 if delta == 0 else 0.0
    return float(2 * norm.sf(abs(delta) / se))


def _normal_ci(delta: float, se: float) -> tuple[float, float]:
    return delta - Z_975 * se, delta + Z_975 * se


def holm(pvalues: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (the family-wise error rate stays at alpha
    however many metrics are compared); NaN stays NaN."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(order)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for k, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - k) * p))
        out[i] = running
    return out


# -- the tests ---------------------------------------------------------------------------------
def _mcnemar(x, y) -> float:
    """Exact McNemar: the discordant pairs are a fair coin under no change."""
    from scipy.stats import binomtest

    b01 = int(((x == 0) & (y == 1)).sum())  # fail → pass
    b10 = int(((x == 1) & (y == 0)).sum())  # pass → fail
    if b01 + b10 == 0:
        return 1.0
    return float(binomtest(b01, b01 + b10, 0.5).pvalue)


def _fisher(x, y) -> float:
    from scipy.stats import fisher_exact

    if len(x) == 0 or len(y) == 0:
        return math.nan
    table = [[int(x.sum()), len(x) - int(x.sum())], [int(y.sum()), len(y) - int(y.sum())]]
    return float(fisher_exact(table).pvalue)


def _permutation(x, y, rng, resamples: int, *, paired: bool) -> float:
    from scipy.stats import permutation_test

    if len(x) < 2 or len(y) < 2:
        return math.nan
    if paired and not (x != y).any():
        return 1.0  # every pair equal: nothing to permute
    res = permutation_test((x, y), lambda u, v, axis: v.mean(axis=axis) - u.mean(axis=axis),
                           permutation_type="samples" if paired else "independent", n_resamples=resamples,
                           vectorized=True, alternative="two-sided", rng=rng, batch=_batch(len(x) + len(y)))
    return float(res.pvalue)


def _bootstrap_paired(d, rng, resamples: int) -> tuple[float, float]:
    from scipy.stats import bootstrap

    if len(d) < 2 or not (d != d[0]).any():
        return (float(d[0]), float(d[0])) if len(d) else (math.nan, math.nan)
    res = bootstrap((d,), lambda u, axis: u.mean(axis=axis), n_resamples=resamples, vectorized=True,
                    method="percentile", confidence_level=0.95, rng=rng, batch=_batch(len(d)))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _bootstrap_independent(x, y, rng, resamples: int) -> tuple[float, float]:
    from scipy.stats import bootstrap

    if len(x) < 2 or len(y) < 2:
        return math.nan, math.nan
    res = bootstrap((x, y), lambda u, v, axis: v.mean(axis=axis) - u.mean(axis=axis), n_resamples=resamples,
                    vectorized=True, method="percentile", confidence_level=0.95, rng=rng, batch=_batch(len(x) + len(y)))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _batch(n: int) -> int:
    """Resamples drawn at once: about 4 million values (32 MB) whatever the cohort size."""
    return max(1, 4_000_000 // max(n, 1))
