""""What changed", the first thing the report and Datasette's ``/-/report`` show: the
latest regressions and improvements the ledger noticed (``detections``), the last 7
days of activity against the 28 before them (``compare``, metric by metric, with its
verdicts), and the latest vally experiment's variant table. Each figure says the
command that reproduces it.

The window ends at the newest iteration's date, not at today: a ledger that was quiet
for a month still shows its last week of work.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta

from .charts import esc


@dataclass
class Glance:
    detections: list = field(default_factory=list)  # analysis.detections.latest rows
    window: object | None = None  # analysis.compare.Comparison of the two windows
    window_command: str = ""
    experiment: object | None = None  # analysis.experiments.Experiment
    experiment_command: str = ""


def gather(conn: sqlite3.Connection, active: str | None) -> Glance:
    from ..analysis import detections, experiments
    from ..analysis.compare import compare

    g = Glance(detections=detections.latest(conn, 5))
    newest = conn.execute("SELECT max(date) FROM iterations WHERE date GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*'"
                          ).fetchone()[0]
    if newest and active:
        end = date.fromisoformat(newest[:10])
        a = {"since": (end - timedelta(days=34)).isoformat(), "until": (end - timedelta(days=7)).isoformat()}
        b = {"since": (end - timedelta(days=6)).isoformat(), "until": end.isoformat()}
        g.window = compare(conn, "iterations", a, b, active=active, paired=False, empty_ok=True)
        g.window_command = (f"agentledger compare --a since={a['since']},until={a['until']}"
                            f" --b since={b['since']},until={b['until']}")
    run = experiments.latest_run(conn)
    if run is not None:
        g.experiment = experiments.load(conn, run[0])
        g.experiment_command = f"agentledger experiment --run {run[0]}"
    return g


def render(g: Glance) -> str:
    from ..analysis import detections as found
    from ..analysis.render import cells

    parts = []
    if g.detections:
        rows = [[d["recorded_at"][:10], d["kind"], found.stream(d), f"{d['before']:.3f} → {d['after']:.3f}"
                 f" ({d['size_sd']:+.2f} SD)", f"{d['began']} → {d['noticed']}",
                 ", ".join(s["signal"] for s in d["signals"]), found.what_changed(d)] for d in g.detections]
        parts.append('<figure id="detections"><figcaption>Latest regressions and improvements noticed'
                     ' <a class="anchor" href="#detections" title="this figure alone">#</a></figcaption>'
                     + _table(["noticed", "kind", "stream", "mean before → since", "began → noticed",
                               "signals that moved", "what changed"], rows)
                     + f'<p class="note">{esc(found.COMMAND)}</p></figure>')
    if g.window is not None:
        c = g.window
        moved = [r for r in c.results if r.verdict in ("improved", "regressed")]
        rows = moved or [r for r in c.results if r.metric == "score"]
        head = (f"The last 7 days ({c.b['since']} to {c.b['until']}, {c.units_b:,} iterations) against the 28 before"
                f" ({c.a['since']} to {c.a['until']}, {c.units_a:,}): "
                + (f"{len(moved)} of {len(c.results)} metrics moved" if moved else
                   "no metric moved beyond what chance explains"))
        parts.append(f'<figure id="what-changed"><figcaption>{esc(head)} <a class="anchor" href="#what-changed"'
                     ' title="this figure alone">#</a></figcaption>' + _table(
                         ["metric", "n", "before", "last 7 days", "change [95 % CI]", "p (adj.)", "verdict"],
                         [cells(r)[:7] for r in rows]) + f'<p class="note">{esc(g.window_command)}</p></figure>')
    if g.experiment is not None:
        e = g.experiment
        rows = [[v.variant, f"{v.stimuli:,}", f"{v.trials:,}", f"{v.pass_rate * 100:.1f} %",
                 f"{v.graders_passed}/{v.graders_total}", _delta(e, v.variant)] for v in e.variants]
        parts.append(f'<figure id="latest-experiment"><figcaption>{esc(f"Latest experiment: {e.experiment or e.run_id}")}'
                     ' <a class="anchor" href="#latest-experiment" title="this figure alone">#</a></figcaption>'
                     + _table(["variant", "stimuli", "trials", "pass rate", "graders passed",
                               f"pass rate against {e.baseline}"], rows)
                     + f'<p class="note">{esc(g.experiment_command)}</p></figure>')
    return "".join(parts) or ('<figure id="what-changed"><p>Nothing to compare yet: no dated iterations and no'
                              ' vally experiment.</p></figure>')


def _delta(e, variant: str) -> str:
    d = e.deltas.get(variant)
    if d is None:
        return "baseline" if variant == e.baseline else ""
    r = next((r for r in d.results if r.metric == "pass_rate"), None)
    if r is None or r.delta != r.delta:
        return "not enough data"
    return f"{r.delta * 100:+.1f} pp, {r.verdict}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows) + "</table>")
