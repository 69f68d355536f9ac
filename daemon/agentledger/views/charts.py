"""Inline SVG charts for the report: plain strings, no JS, no fonts, nothing fetched.

Every mark carries a ``<title>`` with its exact numbers (the browser shows it on
hover), and every colour in a legend has its words beside it. Colours come from
Paul Tol's "muted" scheme, chosen to stay distinguishable under the common
colour-vision deficiencies; where there would be more than a handful of series
(one line per signal), the charts use small multiples in one colour instead.
Labels that could collide live in their own margins: band names to the right of
the plot, rubric changes in a strip above it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from . import stats

INDIGO, CYAN, TEAL, GREEN, OLIVE, SAND, ROSE, WINE, PURPLE, GREY = (
    "#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499", "#BBBBBB")
SERIES = (INDIGO, SAND, TEAL, ROSE, CYAN, OLIVE, WINE, GREEN, PURPLE, GREY)
SPREAD = "#C4E8F7"  # CYAN at 45 % on white, solid so the percentile band has one exact colour
BAND_COLOURS = {"excellent": GREEN, "good": TEAL, "fair": SAND, "poor": ROSE, "unscored": "#DDDDDD"}
W = 880
L, R, T, B = 48, 112, 34, 40  # plot margins: band labels right, rubric changes above, ticks and legend below


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def frame(chart_id: str, title: str, body: str, height: int, desc: str = "", note: str = "") -> str:
    """A figure the page can link to (``report.html#chart-id`` shows that chart alone)."""
    return (f'<figure id="{esc(chart_id)}"><figcaption>{esc(title)} <a class="anchor" href="#{esc(chart_id)}" '
            f'title="this chart alone">#</a></figcaption>'
            f'<svg class="chart" role="img" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
            f'xmlns="http://www.w3.org/2000/svg"><desc>{esc(desc or title)}</desc>{body}</svg>'
            + (f'<p class="note">{esc(note)}</p>' if note else "") + '</figure>')


def empty(chart_id: str, title: str, text: str) -> str:
    return frame(chart_id, title, f'<text class="empty" x="{W / 2}" y="34">{esc(text)}</text>', 60)


def legend(items: Sequence[tuple[str, str]], y: float, x: float = L) -> str:
    """(swatch, words) pairs on one line; a swatch is a colour, or ``line:COLOUR`` /
    ``dash:COLOUR`` / ``dot:COLOUR`` for marks that are not areas."""
    out = []
    for swatch, words in items:
        kind, _, colour = swatch.rpartition(":")
        if kind == "line":
            out.append(f'<line x1="{x:.0f}" x2="{x + 14:.0f}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
                       f'stroke-width="2.5"/>')
        elif kind == "dash":
            out.append(f'<line x1="{x:.0f}" x2="{x + 14:.0f}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
                       f'stroke-width="1.5" stroke-dasharray="3 2"/>')
        elif kind == "dot":
            out.append(f'<circle cx="{x + 7:.0f}" cy="{y - 4}" r="3" fill="{colour}"/>')
        else:
            out.append(f'<rect class="swatch" x="{x:.0f}" y="{y - 10}" width="14" height="10" fill="{colour}"/>')
        out.append(f'<text class="legend" x="{x + 18:.0f}" y="{y}">{esc(words)}</text>')
        x += 28 + 6.2 * len(words)
    return "".join(out)


@dataclass(frozen=True)
class Plot:
    """A plot area inside an SVG and its two scales: x by position in a series of
    ``n``, y from ``lo`` to ``hi`` (bottom to top)."""
    x0: float
    y0: float
    width: float
    height: float
    n: int = 1
    lo: float = 0.0
    hi: float = 1.0

    def x(self, k: float) -> float:
        return self.x0 + (k + 0.5) * self.width / max(self.n, 1)

    def y(self, v: float) -> float:
        v = max(self.lo, min(self.hi, v))
        return self.y0 + (1 - (v - self.lo) / ((self.hi - self.lo) or 1)) * self.height

    @property
    def right(self) -> float:
        return self.x0 + self.width

    @property
    def bottom(self) -> float:
        return self.y0 + self.height

    def grid(self, ticks: Sequence[float] = (0, 0.25, 0.5, 0.75, 1), fmt: str = "{:g}") -> str:
        return "".join(
            f'<line class="grid" x1="{self.x0}" x2="{self.right}" y1="{self.y(t):.1f}" y2="{self.y(t):.1f}"/>'
            f'<text class="tick" x="{self.x0 - 6}" y="{self.y(t) + 4:.1f}" text-anchor="end">{fmt.format(t)}</text>'
            for t in ticks)

    def x_labels(self, labels: Sequence[object], count: int = 10) -> str:
        widest = max((len(str(label)) for label in labels), default=1)
        count = max(2, min(count, int(self.width // (6.5 * widest + 14))))  # long labels (a team's) must not touch
        step = max(1, -(-len(labels) // count))
        return "".join(f'<text class="tick" x="{self.x(k):.1f}" y="{self.bottom + 14}" text-anchor="middle">'
                       f'{esc(labels[k])}</text>' for k in range(0, len(labels), step))

    def band_lines(self, bands: Sequence[tuple[str, float]]) -> str:
        """Dashed threshold lines, named in the right margin."""
        return "".join(
            f'<line class="band" x1="{self.x0}" x2="{self.right}" y1="{self.y(lo):.1f}" y2="{self.y(lo):.1f}" '
            f'stroke="{BAND_COLOURS.get(name, GREY)}"><title>{esc(name)} from {lo:g}</title></line>'
            f'<text class="bandlabel" x="{self.right + 6}" y="{self.y(lo) + 4:.1f}">{esc(name)} ≥ {lo:g}</text>'
            for name, lo in bands)


def _path(points: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{'M' if k == 0 else 'L'}{x:.1f},{y:.1f}" for k, (x, y) in enumerate(points))


def trend(chart_id: str, title: str, points: Sequence[tuple[int, float, str]], bands: Sequence[tuple[str, float]],
          boundaries: Sequence[tuple[int, str]], *, dots_up_to: int = 400) -> str:
    """points: (iteration, value, rubric) in order. A trailing rolling mean with its
    10th–90th percentile band; single iterations as dots while they stay readable."""
    if not points:
        return empty(chart_id, title, "no scores yet")
    height = 300
    p = Plot(L, T, W - L - R, height - T - B, n=len(points))
    values = [v for _, v, _ in points]
    window = stats.rolling_window(len(values))
    roll = stats.rolling(values, window)
    body = [p.grid(), p.band_lines(bands)]
    upper = [(p.x(r.index), p.y(r.p90)) for r in roll]
    lower = [(p.x(r.index), p.y(r.p10)) for r in reversed(roll)]
    body.append(f'<path class="pband" d="{_path(upper + lower)} Z" fill="{SPREAD}">'
                f'<title>10th to 90th percentile of the last {window} iterations</title></path>')
    drawn = len(points) <= dots_up_to
    if drawn:
        body += [f'<circle class="point" cx="{p.x(k):.1f}" cy="{p.y(v):.1f}" r="2.5" fill="#666" fill-opacity="0.7">'
                 f'<title>iteration {it}: {v:.4f} (rubric {esc(version)})</title></circle>'
                 for k, (it, v, version) in enumerate(points)]
    body.append(f'<path class="rolling" d="{_path([(p.x(r.index), p.y(r.mean)) for r in roll])}" fill="none" '
                f'stroke="{INDIGO}" stroke-width="2.2"><title>mean of the last {window} iterations; latest '
                f'{roll[-1].mean:.4f}</title></path>')
    index = {it: k for k, (it, _, _) in enumerate(points)}
    last_label_x = -1e9
    row = 0
    for it, version in boundaries:
        k = max((index[i] for i in index if i <= it), default=None)
        if k is None:
            continue
        x = min(p.x(k + 0.5), p.right - 1)
        row = 1 - row if x - last_label_x < 150 else 0  # a second row when labels would touch
        last_label_x = x
        body.append(f'<line class="boundary" x1="{x:.1f}" x2="{x:.1f}" y1="{T - 4 - 12 * (1 - row)}" '
                    f'y2="{p.bottom}" stroke="{PURPLE}"><title>rubric {esc(version)} active after iteration {it}'
                    f'</title></line><text class="boundarylabel" x="{x - 3:.1f}" y="{T - 20 + 12 * row}" '
                    f'text-anchor="end">rubric {esc(version)} →</text>')
    body.append(p.x_labels([it for it, _, _ in points]))
    items = [(f"line:{INDIGO}", f"mean of last {window}"), (SPREAD, "10th–90th percentile")]
    if drawn:
        items.append(("dot:#666", "one iteration"))
    items += [(f"dash:{GREY}", "band threshold"), (f"line:{PURPLE}", "rubric change")]
    body.append(legend(items, height - 6))
    note = "" if drawn else f"{len(points):,} iterations: single iterations are summarised by the band, not drawn."
    return frame(chart_id, title, "".join(body), height, note=note)


def session_boxes(chart_id: str, title: str, rows: Sequence[tuple[str, stats.Summary]],
                  bands: Sequence[tuple[str, float]], note: str = "") -> str:
    """One row per session, newest on top: min–max whisker, quartile box, median
    tick, and on the right n, the median and its change from the older session below."""
    if not rows:
        return empty(chart_id, title, "no sessions scored yet")
    row_h, top = 20, 26
    height = top + row_h * len(rows) + 34
    p = Plot(170, top, W - 170 - 210, row_h * len(rows))
    sx = lambda v: p.x0 + max(0.0, min(1.0, v)) * p.width  # noqa: E731
    body = []
    for name, lo in bands:
        colour = BAND_COLOURS.get(name, GREY)
        body.append(f'<line class="band" x1="{sx(lo):.1f}" x2="{sx(lo):.1f}" y1="{top - 4}" y2="{p.bottom}" '
                    f'stroke="{colour}"><title>{esc(name)} from {lo:g}</title></line>'
                    f'<text class="bandlabel" x="{sx(lo) + 3:.1f}" y="{top - 8}">{esc(name)}</text>')
    for k, (session, s) in enumerate(rows):
        y = top + k * row_h + row_h / 2
        older = rows[k + 1][1] if k + 1 < len(rows) else None
        change = "" if older is None else f" · {s.median - older.median:+.3f}"
        tip = (f"{session}: {s.n} iterations, min {s.low:.3f}, q1 {s.q1:.3f}, median {s.median:.3f}, "
               f"q3 {s.q3:.3f}, max {s.high:.3f}, mean {s.mean:.3f}")
        body.append(f'<g class="session"><title>{esc(tip)}</title>'
                    f'<text class="rowlabel" x="{p.x0 - 8}" y="{y + 4:.1f}" text-anchor="end">{esc(session[:26])}</text>'
                    f'<line x1="{sx(s.low):.1f}" x2="{sx(s.high):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{INDIGO}"/>'
                    f'<rect class="box" x="{sx(s.q1):.1f}" y="{y - 6:.1f}" width="{max(sx(s.q3) - sx(s.q1), 1.5):.1f}" '
                    f'height="12" fill="{CYAN}" stroke="{INDIGO}"/>'
                    f'<line class="median" x1="{sx(s.median):.1f}" x2="{sx(s.median):.1f}" y1="{y - 7:.1f}" '
                    f'y2="{y + 7:.1f}" stroke="{INDIGO}" stroke-width="2.5"/>'
                    f'<text class="rowvalue" x="{p.right + 10}" y="{y + 4:.1f}">n={s.n} · median {s.median:.3f}'
                    f'{change}</text></g>')
    body.append("".join(f'<text class="tick" x="{sx(t):.1f}" y="{p.bottom + 14}" text-anchor="middle">{t:g}</text>'
                        for t in (0, 0.25, 0.5, 0.75, 1)))
    body.append(legend([(CYAN, "middle half (q1–q3)"), (f"line:{INDIGO}", "median, whisker min–max")],
                       height - 6, p.x0))
    return frame(chart_id, title, "".join(body), height, note=note)


def shares(chart_id: str, title: str, columns: Sequence[tuple[str, dict[str, int]]], order: Sequence[str]) -> str:
    """100 % stacked columns: what share of each group fell in each category."""
    if not columns:
        return empty(chart_id, title, "no scores yet")
    height = 260
    p = Plot(L, 16, W - L - R, height - 16 - B, n=len(columns))
    bw = p.width / len(columns) * 0.86
    body = [p.grid(fmt="{:.0%}")]
    for k, (label, counts) in enumerate(columns):
        total = sum(counts.values()) or 1
        base = 0.0
        for category in order:
            c = counts.get(category, 0)
            if not c:
                continue
            y0, y1 = p.y(base), p.y(base + c / total)
            body.append(f'<rect class="share" x="{p.x(k) - bw / 2:.1f}" y="{y1:.1f}" width="{bw:.1f}" '
                        f'height="{y0 - y1:.1f}" fill="{BAND_COLOURS.get(category, GREY)}"><title>iterations '
                        f'{esc(label)}: {esc(category)} {c} of {total} ({c / total:.1%})</title></rect>')
            base += c / total
    body.append(p.x_labels([label.split("–")[0] for label, _ in columns]))
    body.append(legend([(BAND_COLOURS.get(c, GREY), c) for c in order], height - 6))
    return frame(chart_id, title, "".join(body), height)


def multiples(chart_id: str, title: str, panels: Sequence[tuple[str, str, Sequence[float | None]]],
              x_labels: tuple[str, str], columns: int = 4) -> str:
    """Small multiples in one colour, all on the same axes: (name, subtitle, values
    per group; None where the group has none)."""
    if not panels:
        return empty(chart_id, title, "no scores yet")
    pw, ph, gap, head = (W - 20) / columns, 120, 18, 30
    rows = -(-len(panels) // columns)
    height = rows * (ph + head + gap) + 6
    body = []
    for j, (name, subtitle, values) in enumerate(panels):
        ox, oy = 10 + (j % columns) * pw, (j // columns) * (ph + head + gap) + head
        p = Plot(ox + 26, oy, pw - 40, ph - 22, n=len(values))
        body.append(f'<text class="paneltitle" x="{ox + 26}" y="{oy - 16}">{esc(name)}</text>'
                    f'<text class="tick" x="{ox + 26}" y="{oy - 4}">{esc(subtitle)}</text>'
                    f'<rect x="{p.x0}" y="{p.y0}" width="{p.width:.1f}" height="{p.height}" fill="#fafafa"/>'
                    + p.grid((0, 0.5, 1)))
        runs, current = [], []
        for k, v in enumerate(values):
            if v is None:
                if current:
                    runs.append(current)
                current = []
            else:
                current.append((p.x(k), p.y(v)))
        runs.append(current)
        body += [f'<path class="panelline" d="{_path(r)}" fill="none" stroke="{INDIGO}" stroke-width="1.6"/>'
                 for r in runs if len(r) > 1]
        body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.6" fill="{INDIGO}"/>' for r in runs if len(r) == 1
                 for x, y in r]
        body.append(f'<text class="tick" x="{p.x0}" y="{p.bottom + 13}">{esc(x_labels[0])}</text>'
                    f'<text class="tick" x="{p.right}" y="{p.bottom + 13}" text-anchor="end">{esc(x_labels[1])}</text>')
    return frame(chart_id, title, "".join(body), height)


def stacked(chart_id: str, title: str, contributions: dict, order: Sequence[str]) -> str:
    """One column per iteration, one segment per signal's contribution to its score."""
    its = list(contributions)
    if not its:
        return empty(chart_id, title, "no scores yet")
    colour = {s: SERIES[k % len(SERIES)] for k, s in enumerate(order)}
    height = 280
    p = Plot(L, 16, W - L - 16, height - 16 - B - 16, n=len(its))
    bw = p.width / len(its) * 0.8
    body = [p.grid()]
    for k, it in enumerate(its):
        base = 0.0
        for signal, c in contributions[it]:
            if c <= 0:
                continue
            y0, y1 = p.y(base), p.y(base + c)
            body.append(f'<rect class="segment" x="{p.x(k) - bw / 2:.1f}" y="{y1:.1f}" width="{bw:.1f}" '
                        f'height="{y0 - y1:.1f}" fill="{colour[signal]}"><title>iteration {it} · {esc(signal)}: '
                        f'+{c:.4f}</title></rect>')
            base += c
    body.append(p.x_labels(its))
    half = -(-len(order) // 2)  # the legend on two lines: eight signal names do not fit on one
    body.append(legend([(colour[s], s) for s in order[:half]], height - 20))
    body.append(legend([(colour[s], s) for s in order[half:]], height - 4))
    return frame(chart_id, title, "".join(body), height)


@dataclass(frozen=True)
class Bar:
    """One bar of an hbars panel: value, optional interval, the words at its end."""
    value: float | None
    text: str
    lo: float | None = None
    hi: float | None = None
    parts: tuple[float, ...] = ()  # a split of value into stacked segments (darkest first)
    tip: str = ""  # the hover text, when it says more than ``text``


def hbars(chart_id: str, title: str, labels: Sequence[str], panels: Sequence[tuple[str, float, Sequence[Bar]]],
          legend_items: Sequence[tuple[str, str]] = (), note: str = "") -> str:
    """Rows of horizontal bars, one panel beside another: (heading, the panel's
    maximum, one Bar per row). A bar of 0 draws a mark at 0, so that zero is never
    mistaken for a row with no data (which draws "no data")."""
    if not labels:
        return empty(chart_id, title, "nothing to show")
    row_h, top, left = 22, 24, 200
    height = top + row_h * len(labels) + (34 if legend_items else 14)
    span = (W - left - 10) / len(panels)
    body = [f'<text class="rowlabel" x="{left - 8}" y="{top + k * row_h + 15}" text-anchor="end">{esc(label[:30])}'
            f'<title>{esc(label)}</title></text>' for k, label in enumerate(labels)]
    for j, (heading, top_value, bars) in enumerate(panels):
        x0, width = left + j * span, span * 0.62
        body.append(f'<text class="paneltitle" x="{x0}" y="{top - 8}">{esc(heading)}</text>'
                    f'<line class="axis" x1="{x0}" x2="{x0}" y1="{top}" y2="{top + row_h * len(labels)}"/>')
        scale = width / (top_value or 1)
        for k, bar in enumerate(bars):
            y = top + k * row_h + 4
            if bar.value is None:
                body.append(f'<text class="rowvalue nodata" x="{x0 + 4}" y="{y + 11}">{esc(bar.text or "no data")}'
                            f'</text>')
                continue
            segments = bar.parts or (bar.value,)
            x = x0
            for s, part in enumerate(segments):
                w = max(part * scale, 0.0)
                body.append(f'<rect class="bar" x="{x:.1f}" y="{y}" width="{w:.1f}" height="14" '
                            f'fill="{(INDIGO, CYAN)[s % 2] if bar.parts else TEAL}"><title>{esc(labels[k])}: {esc(bar.tip or bar.text)}</title>'
                            '</rect>')
                x += w
            if bar.value == 0:
                body.append(f'<rect class="zero" x="{x0}" y="{y - 1}" width="2.5" height="16" fill="{ROSE}"/>')
            if bar.lo is not None and bar.hi is not None:
                a, b = x0 + bar.lo * scale, x0 + bar.hi * scale
                body.append(f'<path class="ci" d="M{a:.1f},{y + 3}V{y + 11}M{a:.1f},{y + 7}H{b:.1f}M{b:.1f},{y + 3}'
                            f'V{y + 11}" stroke="#222" fill="none"><title>95 % interval {bar.lo:.3f}–{bar.hi:.3f}'
                            f'</title></path>')
            body.append(f'<text class="rowvalue" x="{max(x, x0 + (bar.hi or 0) * scale) + 6:.1f}" y="{y + 11}">'
                        f'{esc(bar.text)}</text>')
    if legend_items:
        body.append(legend(legend_items, height - 8, left))
    return frame(chart_id, title, "".join(body), height, note=note)
