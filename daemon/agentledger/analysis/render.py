"""A comparison for people: a terminal table, Markdown that reads well as a
pull-request comment, or JSON (NaN as null) for programs."""

from __future__ import annotations

import json
import math

from ..terminal import shown
from .compare import Comparison, Result

VERDICT_MARK = {"improved": "improved", "regressed": "REGRESSED", "no detectable change": "no detectable change",
                "not enough data": "not enough data"}


def to_json(data: object) -> str:
    """JSON with NaN and infinities as null (JSON has neither)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(data), indent=2)


def as_json(c: Comparison) -> str:
    return to_json({**c.as_dict(), "summary": summary(c)})


def summary(c: Comparison) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in c.results:
        out[r.verdict] = out.get(r.verdict, 0) + 1
    return out


def _cohort(sel: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sel.items()) or "everything"


def heading(c: Comparison) -> str:
    unit, units = {"iterations": ("iteration", "iterations"), "trials": ("stimulus", "stimuli"),
                   "annotations": ("task", "tasks")}[c.kind]
    how = f"paired by {unit}: {c.pairs:,} in both" if c.paired else "independent cohorts"
    return (f"A = {_cohort(c.a)} ({c.units_a:,} {units}); "
            f"B = {_cohort(c.b)} ({c.units_b:,}); {how}; Holm-adjusted at alpha {c.alpha:g}; seed {c.seed}")


def _num(r: Result, v: float, *, signed: bool = False) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    if r.metric.endswith("rate"):
        return f"{v * 100:+.1f} pp" if signed else f"{v * 100:.1f} %"
    if r.metric == "cost_usd":
        return f"{'+' if signed and v >= 0 else '-' if v < 0 else ''}${abs(v):,.4f}"
    if max(abs(r.value_a or 0), abs(r.value_b or 0)) >= 100:
        return f"{v:+,.0f}" if signed else f"{v:,.0f}"
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def _p(p: float) -> str:
    if p is None or not math.isfinite(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def cells(r: Result) -> list[str]:
    ci = f"[{_num(r, r.ci_low, signed=True)}, {_num(r, r.ci_high, signed=True)}]"
    n = f"{r.n_a:,}" if r.n_a == r.n_b else f"{r.n_a:,}/{r.n_b:,}"
    verdict = VERDICT_MARK[r.verdict]
    if r.verdict == "no detectable change" and math.isfinite(r.mde):
        verdict += f" (could detect ±{_num(r, r.mde).lstrip('+')})"
    return [r.label, n, _num(r, r.value_a), _num(r, r.value_b), f"{_num(r, r.delta, signed=True)} {ci}",
            _p(r.p_adjusted), verdict, r.test]


HEADERS = ["metric", "n", "A", "B", "B − A [95 % CI]", "p (adj.)", "verdict", "test"]
ALIGN = "lrrrrrll"  # Markdown column alignment: figures to the right


def table(headers: list[str], rows: list[list[str]], *, markdown: bool = False, align: str = "") -> list[str]:
    """The lines of a table: aligned columns for a terminal, or Markdown (``align``:
    an ``l`` or ``r`` a column). Every cell shown as ``terminal.shown`` shows it: a
    variant or an eval named with an escape sequence or a line break stays in its cell."""
    headers = [shown(h) for h in headers]
    rows = [[shown(c) for c in row] for row in rows]
    if markdown:
        rule = ["---:" if a == "r" else "---" for a in align.ljust(len(headers), "l")]
        return (["| " + " | ".join(headers) + " |", "|" + "|".join(rule) + "|"]
                + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(headers, *rows)]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def text(c: Comparison) -> str:
    lines = [f"compare {c.kind}: {heading(c)}", "", *table(HEADERS, [cells(r) for r in c.results])]
    s = summary(c)
    lines += ["", ", ".join(f"{n} {v}" for v, n in s.items())]
    if any(c.unpriced):
        lines.append(f"unpriced {c.kind} (no token counts, or no price for their model; [cost] prices adds one):"
                     f" A {c.unpriced[0]:,}, B {c.unpriced[1]:,}")
    return "\n".join(lines)


def markdown(c: Comparison) -> str:
    s = summary(c)
    verdicts = ", ".join(f"**{n} {v}**" if v in ("improved", "regressed") else f"{n} {v}" for v, n in s.items())
    rows = []
    for r in c.results:
        row = cells(r)
        if r.verdict in ("improved", "regressed"):
            row[6] = f"**{row[6]}**"
        rows.append(row)
    lines = [f"### agentledger compare: {c.kind}", "", heading(c), "", verdicts, "",
             *table(HEADERS, rows, markdown=True, align=ALIGN)]
    return "\n".join(lines) + "\n"
