"""``agentledger report``: one self-contained HTML file with the ledger's charts.

No network at view time: the charts are inline SVG written here (no JS, no
fonts, no CDN), so the file opens the same from a mail attachment or an
air-gapped laptop. Each chart is an ``<svg class="chart" id="…">`` whose marks
carry ``<title>`` tooltips with the exact numbers. Data comes from the
documented views only (``score_history``, ``latest_scores``,
``signal_contributions``, ``integrity_deltas``, ``quarantine_summary``,
``trial_pass_rates_by_model``), so the report shows what a query would.
"""

from __future__ import annotations

import html
import sqlite3
from dataclasses import dataclass, field

PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e",
           "#9498a0")
BAND_COLOURS = {"excellent": "#3ca951", "good": "#6cc5b0", "fair": "#efb118", "poor": "#ff725c"}
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 880, 260, 48, 16, 16, 36


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


@dataclass
class Data:
    first_scores: list[tuple] = field(default_factory=list)  # (iteration, value, rubric, session)
    latest: list[tuple] = field(default_factory=list)  # (iteration, value, band, rubric, session)
    boundaries: list[tuple[int, str]] = field(default_factory=list)  # (iteration, rubric activated)
    contributions: dict[int | str, list[tuple[str, float]]] = field(default_factory=dict)
    integrity: list[tuple] = field(default_factory=list)  # (role, signal, claimed, observed, pairs)
    quarantine: list[tuple] = field(default_factory=list)  # (kind, open, resolved)
    pass_rates: list[tuple] = field(default_factory=list)  # (eval, model, trials, passed, rate)
    bands: list[tuple[str, float]] = field(default_factory=list)
    rubric: str = ""
    session: str | None = None
    since: str | None = None


def gather(conn: sqlite3.Connection, *, since: str | None = None, session: str | None = None,
           max_bars: int = 80) -> Data:
    from ..scoring import rubric as rubrics

    d = Data(session=session, since=since)
    d.rubric = (conn.execute("SELECT value FROM ledger_state WHERE key = 'active_rubric'").fetchone() or [""])[0]
    if d.rubric:
        d.bands = [(n, lo) for n, lo in rubrics.load(d.rubric).bands if lo > float("-inf")]
    def only(session_col: str, time_col: str) -> tuple[str, list]:
        """The --session / --since filters as SQL on the given columns."""
        cond, args = [], []
        if session:
            cond.append(f"{session_col} = ?")
            args.append(session)
        if since:
            cond.append(f"{time_col} >= ?")
            args.append(since)
        return "".join(f" AND {c}" for c in cond), args

    # each iteration as first scored (the rubric active when it closed), and as scored now
    where, args = only("i.session_id", "h.scored_at")
    d.first_scores = [tuple(r) for r in conn.execute(
        # the first score.computed event of each iteration, found once (MATERIALIZED), then
        # joined by seq: a correlated subquery over the view costs O(n²) at 10,000 iterations
        "WITH first AS MATERIALIZED (SELECT min(seq) AS seq FROM events WHERE type = 'score.computed'"
        " GROUP BY source, json_extract(payload, '$.iteration'))"
        " SELECT h.iteration, h.value, h.rubric_version, i.session_id, h.source FROM first"
        " JOIN score_history h ON h.seq = first.seq"
        " LEFT JOIN iterations i ON i.source = h.source AND i.iteration = h.iteration"
        " WHERE 1" + where + " ORDER BY h.source, h.iteration", args)]
    where, args = only("l.session_id", "l.scored_at")
    d.latest = [tuple(r) for r in conn.execute(
        "SELECT l.iteration, l.value, l.band, l.rubric_version, l.session_id, l.source FROM latest_scores l WHERE 1"
        + where + " ORDER BY l.source, l.iteration", args)]
    sources = {r[5] for r in d.latest}
    # where each rubric took over: the last iteration recorded before its activation
    for seq, payload_version in conn.execute(
            "SELECT seq, json_extract(payload, '$.version') FROM events WHERE type = 'rubric.activated' ORDER BY seq"):
        row = conn.execute("SELECT max(CAST(json_extract(payload, '$.iteration') AS INTEGER)) FROM events"
                           " WHERE type = 'score.computed' AND seq < ?", (seq,)).fetchone()
        if row and row[0] is not None:
            d.boundaries.append((row[0], payload_version))
    shown = {(r[5], r[0]) for r in d.latest[-max_bars:]}
    for src, it, signal, contribution in conn.execute(
            "SELECT c.source, c.iteration, c.signal, c.contribution FROM latest_scores l JOIN signal_contributions c"
            " ON c.source = l.source AND c.iteration = l.iteration AND c.rubric_version = l.rubric_version"
            " WHERE c.present ORDER BY l.source, l.iteration, c.rowid"):
        if (src, it) in shown:
            d.contributions.setdefault(it if len(sources) < 2 else f"{src.rsplit('/', 1)[-1]}:{it}", []).append(
                (signal, contribution or 0.0))
    d.integrity = [tuple(r) for r in conn.execute(
        "SELECT role, signal, round(avg(claimed_sub_score), 4), round(avg(observed_sub_score), 4), count(*)"
        " FROM integrity_deltas WHERE comparable AND rubric_version = ? GROUP BY role, signal ORDER BY role, signal",
        (d.rubric,))]
    d.quarantine = [tuple(r) for r in conn.execute(
        "SELECT kind, sum(open), sum(resolved) FROM quarantine_summary GROUP BY kind ORDER BY kind")]
    d.pass_rates = [tuple(r) for r in conn.execute(
        "SELECT eval_name, model, trials, passed, pass_rate FROM trial_pass_rates_by_model"
        " ORDER BY eval_name, model")]
    return d


# -- SVG pieces ---------------------------------------------------------------------------------------
def _frame(chart_id: str, title: str, body: str, height: int = H, desc: str = "") -> str:
    return (f'<figure><figcaption>{esc(title)}</figcaption>'
            f'<svg class="chart" id="{esc(chart_id)}" role="img" viewBox="0 0 {W} {height}" width="{W}" '
            f'height="{height}" xmlns="http://www.w3.org/2000/svg"><desc>{esc(desc or title)}</desc>{body}</svg>'
            f'</figure>')


def _y(v: float, height: int = H) -> float:
    return PAD_T + (1 - max(0.0, min(1.0, v))) * (height - PAD_T - PAD_B)


def _axes(height: int = H, ticks=(0, 0.25, 0.5, 0.75, 1)) -> str:
    out = []
    for t in ticks:
        y = _y(t, height)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{t:g}</text>')
    return "".join(out)


def _xpos(i: int, n: int) -> float:
    return PAD_L + (i + 0.5) * (W - PAD_L - PAD_R) / max(n, 1)


def _x_labels_and_legend(labels: list, legend: list[tuple[str, str]]) -> str:
    """About a dozen x-axis labels under the columns, and a one-line coloured legend."""
    step = max(1, len(labels) // 12)
    ticks = "".join(f'<text class="tick" x="{_xpos(k, len(labels)):.1f}" y="{H - PAD_B + 16}" '
                    f'text-anchor="middle">{esc(labels[k])}</text>' for k in range(0, len(labels), step))
    items = "".join(f'<tspan fill="{colour}">{esc(text)}  </tspan>' for colour, text in legend)
    return ticks + f'<text class="legend" x="{PAD_L}" y="{H - 4}">{items}</text>'


def trend_chart(chart_id: str, title: str, points: list[tuple], bands: list[tuple[str, float]],
                boundaries: list[tuple[int, str]]) -> str:
    """points: (iteration, value, rubric); band thresholds as dashed lines, rubric boundaries as
    vertical lines, points coloured by rubric version."""
    pts = [p for p in points if p[1] is not None]
    if not pts:
        return _frame(chart_id, title, '<text class="empty" x="50%" y="50%">no scores yet</text>')
    body = [_axes()]
    for name, lo in bands:
        y = _y(lo)
        body.append(f'<line class="band" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="{BAND_COLOURS.get(name, "#999")}"><title>{esc(name)} ≥ {lo:g}</title></line>'
                    f'<text class="bandlabel" x="{W - PAD_R - 2}" y="{y - 3:.1f}" text-anchor="end" '
                    f'fill="{BAND_COLOURS.get(name, "#999")}">{esc(name)}</text>')
    index = {p[0]: k for k, p in enumerate(pts)}
    rubrics = list(dict.fromkeys(p[2] for p in pts))
    colour = {r: PALETTE[k % len(PALETTE)] for k, r in enumerate(rubrics)}
    for it, version in boundaries:
        k = max((index[i] for i in index if i <= it), default=None)
        if k is None:
            continue
        x = (_xpos(k, len(pts)) + _xpos(k + 1, len(pts))) / 2  # after the last one: at the right edge
        x = min(x, W - PAD_R - 1)
        body.append(f'<line class="boundary" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}">'
                    f'<title>rubric {esc(version)} activated after iteration {it}</title></line>'
                    f'<text class="boundarylabel" x="{x - 3:.1f}" y="{PAD_T + 10}" text-anchor="end">'
                    f'→ rubric {esc(version)}</text>')
    path = " ".join(f"{'M' if k == 0 else 'L'}{_xpos(k, len(pts)):.1f},{_y(p[1]):.1f}" for k, p in enumerate(pts))
    body.append(f'<path class="trend" d="{path}"/>')
    for k, (it, v, version, *_rest) in enumerate(pts):
        body.append(f'<circle class="point" cx="{_xpos(k, len(pts)):.1f}" cy="{_y(v):.1f}" r="3" '
                    f'fill="{colour[version]}"><title>iteration {it}: {v:.4f} (rubric {esc(version)})</title></circle>')
    body.append(_x_labels_and_legend([p[0] for p in pts], [(colour[r], f"● rubric {r}") for r in rubrics]))
    return _frame(chart_id, title, "".join(body))


def stacked_chart(chart_id: str, title: str, contributions: dict) -> str:
    its = list(contributions)  # in source, iteration order
    if not its:
        return _frame(chart_id, title, '<text class="empty" x="50%" y="50%">no scores yet</text>')
    signals = list(dict.fromkeys(s for it in its for s, _ in contributions[it]))
    colour = {s: PALETTE[k % len(PALETTE)] for k, s in enumerate(signals)}
    bw = (W - PAD_L - PAD_R) / len(its) * 0.8
    body = [_axes()]
    for k, it in enumerate(its):
        base = 0.0
        x = _xpos(k, len(its)) - bw / 2
        for signal, c in contributions[it]:
            if c <= 0:
                continue
            y0, y1 = _y(base), _y(base + c)
            body.append(f'<rect class="segment" x="{x:.1f}" y="{y1:.1f}" width="{bw:.1f}" height="{y0 - y1:.1f}" '
                        f'fill="{colour[signal]}"><title>iteration {it} · {esc(signal)}: +{c:.4f}</title></rect>')
            base += c
    body.append(_x_labels_and_legend(its, [(colour[s], f"■ {s}") for s in signals]))
    return _frame(chart_id, title, "".join(body))


def paired_bars(chart_id: str, title: str, rows: list[tuple[str, float, float, str]], labels=("claimed", "observed"),
                empty: str = "nothing to show") -> str:
    """rows: (name, a, b, tooltip) as two horizontal bars each, 0..1."""
    if not rows:
        return _frame(chart_id, title, f'<text class="empty" x="50%" y="40">{esc(empty)}</text>', 60)
    row_h, left = 30, 220
    height = PAD_T + row_h * len(rows) + 28
    body = []
    span = W - left - PAD_R
    for k, (name, a, b, tip) in enumerate(rows):
        y = PAD_T + k * row_h
        body.append(f'<text class="rowlabel" x="{left - 8}" y="{y + 15}" text-anchor="end">{esc(name)}</text>')
        for j, (v, cls) in enumerate(((a, "bar-a"), (b, "bar-b"))):
            if v is None:
                continue
            body.append(f'<rect class="{cls}" x="{left}" y="{y + 2 + j * 12}" width="{max(v, 0) * span:.1f}" '
                        f'height="11"><title>{esc(name)} {labels[j]}: {v:.3f} · {esc(tip)}</title></rect>')
    body.append(f'<text class="legend" x="{left}" y="{height - 6}"><tspan class="leg-a">■ {labels[0]}</tspan>'
                f'  <tspan class="leg-b">■ {labels[1]}</tspan>  (0 to 1)</text>')
    return _frame(chart_id, title, "".join(body), height)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:#222;margin:24px auto;max-width:920px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px} p.meta{color:#666;margin:0 0 12px}
figure{margin:8px 0 18px} figcaption{font-weight:600;margin-bottom:4px}
svg.chart{background:#fff;border:1px solid #e4e4e4} .grid{stroke:#eee} .tick,.legend,.rowlabel{font-size:11px;fill:#555}
.band{stroke-dasharray:5 4;stroke-width:1.2} .bandlabel{font-size:10px}
.boundary{stroke:#7a3eb1;stroke-dasharray:2 3;stroke-width:1.5} .boundarylabel{font-size:10px;fill:#7a3eb1}
.trend{fill:none;stroke:#bbb;stroke-width:1} .bar-a,.leg-a{fill:#97bbf5} .bar-b,.leg-b{fill:#4269d0}
.empty{font-size:12px;fill:#999;text-anchor:middle}
table{border-collapse:collapse;margin:6px 0 16px} td,th{border-bottom:1px solid #eee;padding:3px 10px;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
"""


def render(d: Data, *, generated_at: str, ledger: str) -> str:
    scope = []
    if d.session:
        scope.append(f"session {d.session}")
    if d.since:
        scope.append(f"scores since {d.since}")
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>agentledger report</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>agentledger report</h1><p class=meta>{esc(ledger)} · active rubric {esc(d.rubric or '-')} · "
             f"{len(d.latest)} iterations{' · ' + esc(', '.join(scope)) if scope else ''} · generated "
             f"{esc(generated_at)}</p>"]
    parts.append("<h2>Score trend</h2>")
    parts.append(trend_chart("trend-overall", "All iterations, as first scored (band thresholds dashed, rubric "
                             "changes marked)", [p[:3] for p in d.first_scores], d.bands, d.boundaries))
    sessions = list(dict.fromkeys(p[4] for p in d.latest if p[4]))
    for k, s in enumerate(sessions[:12]):
        pts = [(p[0], p[1], p[3]) for p in d.latest if p[4] == s]
        parts.append(trend_chart(f"trend-session-{k}", f"Session {s} (current scores)", pts, d.bands, []))
    if len(sessions) > 12:
        parts.append(f"<p class=meta>{len(sessions) - 12} more sessions not drawn; use --session.</p>")
    parts.append("<h2>What each signal contributed</h2>")
    parts.append(stacked_chart("contributions", f"Per iteration (latest score; last {len(d.contributions)})",
                               d.contributions))
    parts.append("<h2>Integrity: claimed vs observed</h2>")
    parts.append(paired_bars("integrity", f"Mean sub-score by role and signal (comparable pairs, rubric {d.rubric})",
                             [(f"{r[0]} · {r[1]}", r[2], r[3], f"{r[4]} pairs") for r in d.integrity],
                             empty="no comparable claims"))
    parts.append("<h2>Quarantine</h2>")
    if d.quarantine:
        parts.append("<table id=quarantine><tr><th>kind</th><th>open</th><th>resolved</th></tr>" + "".join(
            f"<tr><td>{esc(k)}</td><td class=num>{o}</td><td class=num>{r}</td></tr>" for k, o, r in d.quarantine)
            + "</table>")
    else:
        parts.append("<p id=quarantine>Nothing was ever quarantined.</p>")
    if d.pass_rates:
        parts.append("<h2>Eval pass rate</h2>")
        parts.append(paired_bars("pass-rates", "By eval and model (all runs)",
                                 [(f"{e} · {m}", r, None, f"{p}/{t} passed") for e, m, t, p, r in d.pass_rates],
                                 labels=("pass rate", "")))
    parts.append("</body></html>\n")
    return "".join(parts)
