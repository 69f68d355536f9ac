"""vally experiments, per run, variant and stimulus: the figures vally's own
``report.md`` shows, and what it lacks.

report.md's figures, from the same fields: pass rate, graders passed (of the
trial's top-level graders), duration (the trajectory's ``wallTimeMs``), tokens
(``totalTokens``), turns and tool calls. Added here: pass@k with the unbiased
estimator (Chen et al. 2021: 1 − C(n−c, k)/C(n, k) for n trials with c passes) when a
stimulus has several trials; flaky stimuli (the verdict changes across trials or
runs); each grader's pass rate; the spread of tokens and duration; and each variant
against the baseline with the paired tests of ``compare``.
"""

from __future__ import annotations

import math
import sqlite3
import statistics
from dataclasses import asdict, dataclass, field

from ..terminal import shown


@dataclass
class StimulusRow:
    variant: str
    eval_name: str
    stimulus: str
    trials: int
    passed: int
    graders_passed: int
    graders_total: int
    duration_s: float | None  # mean wallTimeMs / 1000
    tokens: float | None  # mean totalTokens
    turns: float | None
    tool_calls: float | None
    flaky: bool


@dataclass
class VariantRow:
    variant: str
    stimuli: int
    trials: int
    pass_rate: float
    pass_at: dict[int, float]  # k -> mean pass@k over stimuli with at least k trials
    graders_passed: int
    graders_total: int
    tokens_p50: float | None
    tokens_p90: float | None
    duration_p50_s: float | None
    duration_p90_s: float | None
    flaky: int
    cost_usd: float | None = None  # the priced trials' total; None: none priced (or no prices given)
    unpriced: int = 0


@dataclass
class Experiment:
    run_id: str
    experiment: str
    baseline: str
    variants: list[VariantRow] = field(default_factory=list)
    stimuli: list[StimulusRow] = field(default_factory=list)
    graders: list[dict] = field(default_factory=list)  # variant, grader, passed, total
    deltas: dict = field(default_factory=dict)  # variant -> its Comparison with the baseline

    def as_dict(self) -> dict:
        return asdict(self)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator: the chance that at least one of k trials drawn
    without replacement from n (c of them passing) passes."""
    if k > n:
        raise ValueError("k > n")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def latest_run(conn: sqlite3.Connection, experiment: str | None = None) -> tuple[str, str] | None:
    """(run id, experiment name) of the newest experiment run (of ``experiment``)."""
    sql = "SELECT run_id, experiment FROM runs WHERE kind = 'experiment' AND run_id <> ''"
    args: list = []
    if experiment:
        sql += " AND experiment = ?"
        args.append(experiment)
    row = conn.execute(sql + " ORDER BY seq DESC LIMIT 1", args).fetchone()
    return (row[0], row[1]) if row else None


def load(conn: sqlite3.Connection, run_id: str, *, baseline: str | None = None, seed: int = 0,
         prices=None) -> Experiment:
    """``prices`` (``cost.Prices``): each variant's cost, and cost among the deltas."""
    from .compare import compare

    name = (conn.execute("SELECT experiment FROM runs WHERE run_id = ? AND experiment <> '' LIMIT 1",
                         (run_id,)).fetchone() or [""])[0]
    rows = conn.execute(
        "SELECT variant, eval_name, stimulus, passed, graders_passed, graders_total, wall_time_ms, total_tokens,"
        " turns, tool_calls FROM trials WHERE run_id = ? ORDER BY variant, eval_name, stimulus, trial_index,"
        " item_id", (run_id,)).fetchall()
    variants = sorted({r[0] for r in rows})
    base = baseline or ("baseline" if "baseline" in variants else (variants[0] if variants else ""))
    out = Experiment(run_id, name, base)
    verdicts = _verdicts_across_runs(conn, name, run_id) if name else {}
    groups: dict[tuple[str, str, str], list] = {}
    per_variant: dict[str, list] = {}
    for r in rows:
        groups.setdefault((r[0], r[1], r[2]), []).append(r)
        per_variant.setdefault(r[0], []).append(r)
    by_variant: dict[str, list[StimulusRow]] = {}
    for (variant, ev, stim), trials in groups.items():
        seen = {t[3] for t in trials} | verdicts.get((variant, ev, stim), set())
        row = StimulusRow(variant, ev, stim, len(trials), sum(t[3] for t in trials),
                          sum(t[4] or 0 for t in trials), sum(t[5] or 0 for t in trials),
                          _mean([t[6] / 1000 for t in trials if t[6] is not None]),
                          _mean([t[7] for t in trials if t[7] is not None]),
                          _mean([t[8] for t in trials if t[8] is not None]),
                          _mean([t[9] for t in trials if t[9] is not None]), len(seen) > 1)
        out.stimuli.append(row)
        by_variant.setdefault(variant, []).append(row)
    for variant in variants:
        srows = by_variant[variant]
        trials = per_variant[variant]
        ks = sorted({k for s in srows for k in (1, 2, 5, 10) if k <= s.trials})
        tokens = sorted(t[7] for t in trials if t[7] is not None)
        wall = sorted(t[6] / 1000 for t in trials if t[6] is not None)
        out.variants.append(VariantRow(
            variant, len(srows), len(trials), sum(t[3] for t in trials) / len(trials),
            {k: _mean([pass_at_k(s.trials, s.passed, k) for s in srows if s.trials >= k]) for k in ks},
            sum(s.graders_passed for s in srows), sum(s.graders_total for s in srows),
            _quantile(tokens, 0.5), _quantile(tokens, 0.9), _quantile(wall, 0.5), _quantile(wall, 0.9),
            sum(s.flaky for s in srows)))
    out.graders = [{"variant": r[0], "grader": r[1], "passed": r[2], "total": r[3]} for r in conn.execute(
        "SELECT t.variant, g.name, sum(g.passed), count(*) FROM trial_graders g JOIN trials t ON t.source = g.source"
        " AND t.run_dir = g.run_dir AND t.item_id = g.item_id WHERE t.run_id = ? AND g.passed IS NOT NULL"
        " GROUP BY t.variant, g.name ORDER BY t.variant, g.name", (run_id,))]
    if prices is not None:
        from .cost import trial_costs

        costs = {line.group: line for line in trial_costs(conn, prices, "variant", run_id)}
        for row in out.variants:
            line = costs.get(row.variant)
            if line is not None:
                row.cost_usd, row.unpriced = (line.usd if line.priced else None), line.unpriced
    out.deltas = {v: compare(conn, "trials", {"run": run_id, "variant": base}, {"run": run_id, "variant": v},
                             active=None, seed=seed, prices=prices)
                  for v in variants if v != base}
    return out


def _verdicts_across_runs(conn: sqlite3.Connection, experiment: str, run_id: str) -> dict[tuple, set[int]]:
    """Every verdict each (variant, eval, stimulus) of this experiment had in its other runs."""
    out: dict[tuple, set[int]] = {}
    for v, ev, stim, passed in conn.execute(
            "SELECT t.variant, t.eval_name, t.stimulus, t.passed FROM trials t JOIN runs r ON r.source = t.source"
            " AND r.run_dir = t.run_dir WHERE r.experiment = ? AND t.run_id <> ?", (experiment, run_id)):
        out.setdefault((v, ev, stim), set()).add(passed)
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[int(q * 100) - 1] \
        if len(sorted_values) > 1 else float(sorted_values[0])


# -- for people --------------------------------------------------------------------------------
def _f(v: float | None, fmt: str) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def render(exp: Experiment, *, markdown: bool = False) -> str:
    from .render import markdown as compare_markdown
    from .render import table
    from .render import text as compare_text

    h = "### " if markdown else ""
    out = [f"{h}experiment {shown(exp.experiment or '(unnamed)')}, run {shown(exp.run_id)}: baseline"
           f" {shown(exp.baseline)}", ""]
    ks = sorted({k for v in exp.variants for k in v.pass_at})
    rows = [[v.variant, str(v.stimuli), str(v.trials), f"{v.pass_rate * 100:.1f} %",
             *[_f(v.pass_at.get(k), ".3f") for k in ks],
             f"{v.graders_passed}/{v.graders_total}", f"{_f(v.tokens_p50, ',.0f')} / {_f(v.tokens_p90, ',.0f')}",
             f"{_f(v.duration_p50_s, '.1f')} / {_f(v.duration_p90_s, '.1f')}", str(v.flaky),
             ("unpriced" if v.cost_usd is None else f"${v.cost_usd:,.4f}") + (f" ({v.unpriced} unpriced)"
                                                                                 if v.unpriced and v.cost_usd is not None
                                                                                 else "")]
            for v in exp.variants]
    out += table(["variant", "stimuli", "trials", "pass rate", *[f"pass@{k}" for k in ks], "graders passed",
                  "tokens p50 / p90", "duration s p50 / p90", "flaky", "cost"], rows, markdown=markdown)
    out += ["", f"{h}per stimulus", ""]
    rows = [[s.variant, s.eval_name, s.stimulus, f"{s.passed}/{s.trials}",
             f"{s.graders_passed}/{s.graders_total}", _f(s.duration_s, ".1f"), _f(s.tokens, ",.0f"),
             _f(s.turns, ".0f"), _f(s.tool_calls, ".0f"), "flaky" if s.flaky else ""] for s in exp.stimuli]
    out += table(["variant", "eval", "stimulus", "passed", "graders passed", "duration s", "tokens", "turns",
                  "tool calls", ""], rows, markdown=markdown)
    if exp.graders:
        out += ["", f"{h}graders", ""]
        out += table(["variant", "grader", "passed"], [[g["variant"], g["grader"], f"{g['passed']}/{g['total']}"
                                                        f" ({g['passed'] / g['total'] * 100:.0f} %)"]
                                                       for g in exp.graders], markdown=markdown)
    for variant, c in exp.deltas.items():
        out += ["", f"{h}{shown(variant)} against {shown(exp.baseline)}", ""]
        out.append(compare_markdown(c) if markdown else compare_text(c))
    return "\n".join(out)
