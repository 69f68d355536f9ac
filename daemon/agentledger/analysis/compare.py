"""``agentledger compare``: two cohorts, every metric they have, and for each whether
the difference is real.

Units pair when the two cohorts are mostly the same units (the same iterations under
two rubrics, the same stimuli under two variants): then each unit is compared with
itself, which is what makes a small difference detectable. The p-values of all the
metrics are adjusted together (Holm), so comparing twenty signals does not produce a
"significant" one by chance. A verdict says improved or regressed only when the
adjusted p-value is under alpha; otherwise "no detectable change", with the smallest
change the data could have detected.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import asdict, dataclass, field
from statistics import fmean

from . import cohorts, stats

PAIR_SHARE = 0.5  # pair when at least this share of the smaller cohort's units are in both


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    higher_is_better: bool
    binary: bool


TRIAL_METRICS = (
    Metric("pass_rate", "pass rate", True, True),
    Metric("grader_pass_rate", "graders' pass rate", True, True),
    Metric("tokens", "tokens (input + output)", False, False),
    Metric("duration_ms", "duration (ms)", False, False),
    Metric("turns", "turns", False, False),
    Metric("tool_calls", "tool calls", False, False),
    Metric("cost_usd", "cost (USD, priced trials)", False, False),
)


ANNOTATION_METRICS = (
    Metric("score", "score (0–1)", True, False),
    Metric("iterations", "iterations", False, False),
    Metric("wall_time_ms", "wall time (ms)", False, False),
)


@dataclass
class Result:
    metric: str
    label: str
    higher_is_better: bool
    test: str
    n_a: int
    n_b: int
    value_a: float
    value_b: float
    delta: float
    ci_low: float
    ci_high: float
    p: float
    p_adjusted: float
    mde: float
    verdict: str  # improved | regressed | no detectable change | not enough data


@dataclass
class Comparison:
    kind: str
    a: dict[str, str]
    b: dict[str, str]
    units_a: int
    units_b: int
    paired: bool
    pairs: int
    alpha: float
    seed: int
    results: list[Result] = field(default_factory=list)
    unpriced: tuple[int, int] = (0, 0)  # trials of each cohort whose model has no price

    @property
    def regressed(self) -> list[Result]:
        return [r for r in self.results if r.verdict == "regressed"]

    def as_dict(self) -> dict:
        return asdict(self)


def compare(conn: sqlite3.Connection, kind: str, a: dict[str, str], b: dict[str, str], *, active: str | None,
            metrics: list[str] | None = None, paired: bool | None = None, alpha: float = 0.05, seed: int = 0,
            resamples: int = 2000, only: tuple[set | None, set | None] = (None, None),
            prices=None, transcripts=None, empty_ok: bool = False) -> Comparison:
    """``only``: for each cohort, the units its ``git`` term allows (None: no such term).
    A cohort that selects nothing raises ``SelectorError`` saying why (a gate fails
    closed), unless ``empty_ok`` (the report's windows: a quiet week is no mistake).
    ``prices`` (``cost.Prices``): trials and iterations get a cost metric (iterations from
    their ``transcripts``: source -> transcript directories)."""
    if kind == "iterations":
        ca = cohorts.iterations(conn, a, active, only[0], prices, transcripts)
        cb = cohorts.iterations(conn, b, active, only[1], prices, transcripts)
        known = _iteration_metrics(ca, cb)
        if prices is not None:
            known.append(Metric("cost_usd", "cost (USD, priced iterations)", False, False))
    elif kind == "annotations":
        ca, cb = cohorts.annotations(conn, a), cohorts.annotations(conn, b)
        seen = {k for c in (ca, cb) for k, by_unit in c.values.items()
                if k.startswith("failure_mode:") and any(any(v) for v in by_unit.values())}
        known = [*ANNOTATION_METRICS, *[Metric(k, f"failure mode {k.split(':', 1)[1]} (share)", False, True)
                                        for k in sorted(seen)]]
    else:
        ca, cb = cohorts.trials(conn, a, prices), cohorts.trials(conn, b, prices)
        known = [m for m in TRIAL_METRICS if m.name != "cost_usd" or prices is not None]
    for label, c, sel in (("A", ca, a), ("B", cb, b)):
        if not c.units and not empty_ok:
            raise cohorts.SelectorError(cohorts.why_empty(conn, kind, sel, label))
    if metrics:
        by_name = {m.name: m for m in known}
        missing = [m for m in metrics if m not in by_name]
        if missing:
            raise cohorts.SelectorError(f"no metric {', '.join(missing)} here; these are: "
                                        f"{', '.join(m.name for m in known)}")
        known = [by_name[m] for m in metrics]
    shared = set(ca.units) & set(cb.units)
    smaller = min(len(ca.units), len(cb.units))
    if paired is None:
        paired = smaller > 0 and len(shared) >= PAIR_SHARE * smaller
    out = Comparison(kind, a, b, len(ca.units), len(cb.units), paired, len(shared) if paired else 0, alpha, seed,
                     unpriced=(ca.unpriced, cb.unpriced))
    diffs = []
    for k, m in enumerate(known):
        va, vb = ca.values.get(m.name, {}), cb.values.get(m.name, {})
        if paired:
            units = sorted(set(va) & set(vb))
            one_each = all(len(va[u]) == 1 and len(vb[u]) == 1 for u in units)
            xa = [fmean(va[u]) for u in units]
            xb = [fmean(vb[u]) for u in units]
            binary = m.binary and one_each  # several trials a stimulus: compare per-stimulus rates
        else:
            xa = [v for u in sorted(va) for v in va[u]]
            xb = [v for u in sorted(vb) for v in vb[u]]
            binary = m.binary
        if min(len(xa), len(xb)) < 2:
            diffs.append((m, None))
            continue
        diffs.append((m, stats.difference(xa, xb, binary=binary, paired=paired, seed=seed + k,
                                          resamples=resamples)))
    adjusted = stats.holm([d.p if d is not None else math.nan for _, d in diffs])
    for (m, d), p_adj in zip(diffs, adjusted):
        if d is None:
            out.results.append(Result(m.name, m.label, m.higher_is_better, "", 0, 0, math.nan, math.nan, math.nan,
                                      math.nan, math.nan, math.nan, math.nan, math.nan, "not enough data"))
            continue
        out.results.append(Result(m.name, m.label, m.higher_is_better, d.test, d.n_a, d.n_b, d.value_a, d.value_b,
                                  d.delta, d.ci_low, d.ci_high, d.p, p_adj, d.mde, _verdict(m, d, p_adj, alpha)))
    return out


def _verdict(m: Metric, d: stats.Difference, p_adjusted: float, alpha: float) -> str:
    if math.isnan(p_adjusted):
        return "not enough data"
    if p_adjusted < alpha and d.delta != 0:
        return "improved" if (d.delta > 0) == m.higher_is_better else "regressed"
    return "no detectable change"


def _iteration_metrics(a: cohorts.Cohort, b: cohorts.Cohort) -> list[Metric]:
    """The overall score, then each signal either cohort has a sub-score for, in its
    rubric's order and named as the rubric names it."""
    from ..scoring import rubric as rubrics

    out = [Metric("score", "overall score", True, False)]
    present = {k.split(":", 1)[1] for c in (a, b) for k in c.values if k.startswith("signal:")}
    order: dict[str, str] = {}
    for version in dict.fromkeys(v for v in (a.rubric, b.rubric) if v):
        try:
            for s in rubrics.load(version).signals:
                order.setdefault(s.id, s.label)
        except rubrics.UnknownRubric:
            pass
    for signal in [*[s for s in order if s in present], *sorted(present - set(order))]:
        out.append(Metric(f"signal:{signal}", f"{order.get(signal, signal)} (sub-score)", True, False))
    return out
