"""``agentledger report``: one self-contained HTML file with the ledger's charts.

No network at view time: the charts are inline SVG (``charts.py``: no JS, no
fonts, no CDN), so the file opens the same from a mail attachment or an
air-gapped laptop, and ``report.html#sessions`` shows one chart alone (a link
target for Datasette's canned queries). The page is built to read the same at 60
and at 10,000 iterations: trends are rolling summaries rather than one dot per
iteration, sessions come newest first with a cap, and per-signal series are
small multiples rather than eight colours on one axis. Data comes from the
documented views only (``score_history``, ``latest_scores``,
``signal_contributions``, ``integrity_deltas``, ``quarantine_summary``,
``trials``, ``iteration_records``), so the report shows what a query would.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from . import charts, stats
from .charts import esc

SESSIONS_SHOWN = 30  # rows in the per-session charts, newest first
CONTRIBUTION_COLUMNS = 80


@dataclass
class Data:
    first_scores: list[tuple] = field(default_factory=list)  # (iteration, value, rubric, session, source)
    latest: list[tuple] = field(default_factory=list)  # (iteration, value, band, rubric, session, source)
    boundaries: list[tuple[int, str]] = field(default_factory=list)  # (iteration, rubric activated)
    signals: list[str] = field(default_factory=list)  # the active rubric's, in its order
    sub_scores: dict[tuple[str, int], dict[str, tuple[float, float]]] = field(default_factory=dict)
    tokens: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (source, session): in, out
    integrity: list[tuple] = field(default_factory=list)  # (role, signal, claimed, observed, pairs)
    quarantine: list[tuple] = field(default_factory=list)  # (kind, open, resolved)
    pass_rates: list[tuple] = field(default_factory=list)  # (eval, model, trials, passed)
    bands: list[tuple[str, float]] = field(default_factory=list)  # thresholds (the lowest band has none)
    band_names: list[str] = field(default_factory=list)  # best first
    rubric: str = ""
    session: str | None = None
    since: str | None = None
    # the team report (central/team_report.py): per machine / per repository, (name, Summary, band counts)
    groups: dict[str, list[tuple]] = field(default_factory=dict)
    glance: object | None = None  # "what changed" (glance.Glance): the local report's first section


def gather(conn: sqlite3.Connection, *, since: str | None = None, session: str | None = None) -> Data:
    from ..scoring import rubric as rubrics
    from ..store.db import read_state  # the local ledger's (the team report renders from its own tables)

    d = Data(session=session, since=since)
    d.rubric = read_state(conn, "active_rubric") or ""
    if d.rubric:
        active = rubrics.load(d.rubric)
        d.bands = [(n, lo) for n, lo in active.bands if lo > float("-inf")]
        d.band_names = [n for n, _ in active.bands]
        d.signals = list(active.ids)

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
        " WHERE h.value IS NOT NULL" + where + " ORDER BY h.source, h.iteration", args)]
    where, args = only("l.session_id", "l.scored_at")
    d.latest = [tuple(r) for r in conn.execute(
        "SELECT l.iteration, l.value, l.band, l.rubric_version, l.session_id, l.source FROM latest_scores l WHERE 1"
        + where + " ORDER BY l.source, l.iteration", args)]
    # where each rubric took over: the last iteration recorded before its activation
    for seq, version in conn.execute(
            "SELECT seq, json_extract(payload, '$.version') FROM events WHERE type = 'rubric.activated' ORDER BY seq"):
        row = conn.execute("SELECT max(CAST(json_extract(payload, '$.iteration') AS INTEGER)) FROM events"
                           " WHERE type = 'score.computed' AND seq < ?", (seq,)).fetchone()
        if row and row[0] is not None:
            d.boundaries.append((row[0], version))
    wanted = {(r[5], r[0]) for r in d.latest}
    for src, it, signal, present, sub_score, contribution in conn.execute(
            "SELECT c.source, c.iteration, c.signal, c.present, c.sub_score, c.contribution FROM latest_scores l"
            " JOIN signal_contributions c ON c.source = l.source AND c.iteration = l.iteration"
            " AND c.rubric_version = l.rubric_version ORDER BY l.source, l.iteration, c.rowid"):
        if (src, it) in wanted and present:
            d.sub_scores.setdefault((src, it), {})[signal] = (sub_score or 0.0, contribution or 0.0)
    for src, sess, tokens_in, tokens_out in conn.execute(
            "SELECT source, session_id, sum(json_extract(record, '$.session_tokens.input_tokens')),"
            " sum(json_extract(record, '$.session_tokens.output_tokens')) FROM iteration_records"
            " WHERE json_type(record, '$.session_tokens') = 'object' GROUP BY source, session_id"):
        d.tokens[(src, sess)] = (tokens_in or 0, tokens_out or 0)
    d.integrity = [tuple(r) for r in conn.execute(
        "SELECT role, signal, round(avg(claimed_sub_score), 4), round(avg(observed_sub_score), 4), count(*)"
        " FROM integrity_deltas WHERE comparable AND rubric_version = ? GROUP BY role, signal ORDER BY role, signal",
        (d.rubric,))]
    d.quarantine = [tuple(r) for r in conn.execute(
        "SELECT kind, sum(open), sum(resolved) FROM quarantine_summary GROUP BY kind ORDER BY kind")]
    d.pass_rates = [tuple(r) for r in conn.execute(
        "SELECT eval_name, model, count(*), sum(passed) FROM trials GROUP BY eval_name, model ORDER BY eval_name, model")]
    if not (since or session):  # what changed is about the whole ledger
        from . import glance

        d.glance = glance.gather(conn, d.rubric or None)
    return d


# -- what the charts are drawn from ------------------------------------------------------------------
def sessions_newest_first(d: Data) -> list[tuple[tuple[str, str], list[tuple]]]:
    """(source, session) with its latest-score rows, the session with the latest iteration first."""
    groups: dict[tuple[str, str], list[tuple]] = {}
    for row in d.latest:
        if row[4]:
            groups.setdefault((row[5], row[4]), []).append(row)
    # a row's 7th field, when there is one, is when it was scored (a team's iterations share no order)
    return sorted(groups.items(), key=lambda kv: (max(r[6] if len(r) > 6 else r[0] for r in kv[1]), kv[0]),
                  reverse=True)


def session_label(key: tuple[str, str], several_sources: bool) -> str:
    return f"{key[0].rsplit('/', 1)[-1]}:{key[1]}" if several_sources else key[1]


def band_columns(d: Data) -> list[tuple[str, dict[str, int]]]:
    out = []
    for a, b in stats.bins(len(d.latest)):
        counts: dict[str, int] = {}
        for it, value, band, *_ in d.latest[a:b]:
            key = band if value is not None else "unscored"
            counts[key] = counts.get(key, 0) + 1
        out.append((f"{d.latest[a][0]}–{d.latest[b - 1][0]}", counts))
    return out


def signal_panels(d: Data) -> list[tuple[str, str, list[float | None]]]:
    groups = stats.bins(len(d.latest))
    panels = []
    for signal in d.signals:
        series, everything = [], []
        for a, b in groups:
            vals = [subs[signal][0] for r in d.latest[a:b] if signal in (subs := d.sub_scores.get((r[5], r[0]), {}))]
            series.append(sum(vals) / len(vals) if vals else None)
            everything += vals
        subtitle = (f"mean {sum(everything) / len(everything):.3f} · present in {len(everything):,}"
                    if everything else "never present")
        panels.append((signal, subtitle, series))
    return panels


def render(d: Data, *, generated_at: str, ledger: str) -> str:
    scope = []
    if d.session:
        scope.append(f"session {d.session}")
    if d.since:
        scope.append(f"scores since {d.since}")
    sessions = sessions_newest_first(d)
    several = len({r[5] for r in d.latest}) > 1
    shown = sessions[:SESSIONS_SHOWN]
    cut = (f"The newest {len(shown)} of {len(sessions):,} sessions; agentledger report --session ID draws one."
           if len(sessions) > len(shown) else "")
    sections = []
    if d.glance is not None:
        from . import glance

        sections.append(("What changed", glance.render(d.glance)))
    sections += [
        ("Score trend", charts.trend(
            "trend-overall", ("Every iteration's current score, in the order scored" if d.groups else
                              "Every iteration as first scored") + ": rolling mean with its 10th–90th percentile band",
            [p[:3] for p in d.first_scores], d.bands, d.boundaries)),
    ]
    if d.session:
        sections.append((f"Session {d.session}", charts.trend(
            "trend-session", f"Session {d.session}, current scores", [(r[0], r[1], r[3]) for r in d.latest
                                                                      if r[1] is not None], d.bands, [])))
    sections += [
        ("Sessions, newest first", charts.session_boxes(
            "sessions", "Current scores per session; the number on the right is the median's change from the "
            "session below", [(session_label(k, several), stats.summary(vals)) for k, rows in shown
                              if (vals := [r[1] for r in rows if r[1] is not None])], d.bands, note=cut)),
        ("Bands over time", charts.shares(
            "bands-over-time", "Share of iterations in each band (current scores), in groups of consecutive iterations",
            band_columns(d), d.band_names + ["unscored"])),
        ("Signals over time", charts.multiples(
            "signals-over-time", "Mean sub-score of each signal where present (0 to 1), same groups",
            signal_panels(d), (str(d.latest[0][0]), str(d.latest[-1][0])) if d.latest else ("", ""))),
        ("What each signal contributed", charts.stacked(
            "contributions", f"Contribution to the current score, the last {CONTRIBUTION_COLUMNS} iterations",
            {(r[0] if not several else f"{r[5].rsplit('/', 1)[-1]}:{r[0]}"):
             [(s, c) for s, (_, c) in d.sub_scores.get((r[5], r[0]), {}).items()]
             for r in d.latest[-CONTRIBUTION_COLUMNS:]}, d.signals)),
        ("Tokens per session", tokens_chart(d, shown, several, cut)),
        ("Integrity: claimed vs observed", charts.hbars(
            "integrity", f"Mean sub-score by role and signal (comparable pairs, rubric {d.rubric})",
            [f"{r[0]} · {r[1]}" for r in d.integrity],
            [("claimed", 1.0, [charts.Bar(r[2], f"{r[2]:.3f}") for r in d.integrity]),
             ("observed", 1.0, [charts.Bar(r[3], f"{r[3]:.3f} ({r[4]} pairs)") for r in d.integrity])])),
    ]
    for group, rows in reversed(d.groups.items()):  # after the sessions: by machine, then by repository
        sections.insert(2, (f"By {group}", group_chart(group, rows, d.band_names)))
    if d.pass_rates:
        sections.append(("Eval pass rate", pass_rate_chart(d.pass_rates)))
    toc = "".join(f'<a href="#{esc(_anchor(html_))}">{esc(name)}</a>' for name, html_ in sections)
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>agentledger report</title>"
             f"<style>{CSS}</style></head><body>",
             f"<header><h1>agentledger {'team ' if d.groups else ''}report</h1><p class=meta>{esc(ledger)} · "
             f"{'rubric of most scores' if d.groups else 'active rubric'} {esc(d.rubric or '-')} · "
             f"{len(d.latest):,} iterations · {len(sessions):,} sessions"
             f"{' · ' + esc(', '.join(scope)) if scope else ''} · generated {esc(generated_at)}</p>"
             f"<nav>{toc}<a href=\"#quarantine\">Quarantine</a></nav></header>"]
    for name, chart in sections:
        parts.append(f"<h2>{esc(name)}</h2>{chart}")
    parts.append("<h2>Quarantine</h2>")
    if d.quarantine:
        parts.append("<figure id=quarantine><table><tr><th>kind</th><th>open</th><th>resolved</th></tr>" + "".join(
            f"<tr><td>{esc(k)}</td><td class=num>{o}</td><td class=num>{r}</td></tr>" for k, o, r in d.quarantine)
            + "</table></figure>")
    else:
        parts.append("<figure id=quarantine><p>Nothing was ever quarantined.</p></figure>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _anchor(figure_html: str) -> str:  # the first figure's id
    return figure_html.split('id="', 1)[1].split('"', 1)[0]


def _si(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def tokens_chart(d: Data, shown: list, several: bool, note: str) -> str:
    labels, totals, rates = [], [], []
    for key, rows in shown:
        labels.append(session_label(key, several))
        tin, tout = d.tokens.get(key, (None, None))
        totals.append(charts.Bar(None, "no session_tokens recorded") if tin is None else
                      charts.Bar(tin + tout, _si(tin + tout), parts=(tin, tout),
                                 tip=f"{tin + tout:,} tokens: {tin:,} in, {tout:,} out"))
        vals = [subs["token_efficiency"][0] for r in rows
                if "token_efficiency" in (subs := d.sub_scores.get((r[5], r[0]), {}))]
        rates.append(charts.Bar(sum(vals) / len(vals), f"{sum(vals) / len(vals):.3f} (n={len(vals)})")
                     if vals else charts.Bar(None, "not measured"))
    top = max((b.value for b in totals if b.value is not None), default=0)
    return charts.hbars("tokens", "Tokens per session (from the iteration records' session_tokens) and token "
                        "efficiency (mean token_efficiency sub-score: the cache hit rate)", labels,
                        [("tokens", top, totals), ("token efficiency (0 to 1)", 1.0, rates)],
                        [(charts.INDIGO, "input tokens"), (charts.CYAN, "output tokens")], note=note)


def group_chart(group: str, rows: list[tuple], band_names: list[str]) -> str:
    """Mean current score per machine or repository, its middle half as the whisker."""
    best = band_names[0] if band_names else "excellent"
    bars = [charts.Bar(s.mean, f"{s.mean:.3f} · n={s.n} · {bands.get(best, 0) / s.n:.0%} {best}", lo=s.q1, hi=s.q3)
            for _, s, bands in rows]
    return charts.hbars(f"by-{group}", f"Mean current score per {group} (whisker: the middle half, q1 to q3)",
                        [name for name, *_ in rows], [("mean score (0 to 1)", 1.0, bars)])


def pass_rate_chart(rows: list[tuple]) -> str:
    bars = []
    for _eval, _model, trials, passed in rows:
        lo, hi = stats.wilson(passed, trials)
        bars.append(charts.Bar(passed / trials, f"{passed / trials:.0%} · {passed}/{trials} · 95 % CI {lo:.0%}–{hi:.0%}",
                               lo=lo, hi=hi))
    return charts.hbars("pass-rates", "Pass rate by eval and model, all runs (bar: passed/trials; whisker: Wilson "
                        "95 % interval)", [f"{e} · {m}" for e, m, *_ in rows], [("pass rate (0 to 1)", 1.0, bars)])


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:#222;margin:24px auto;max-width:920px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px} p.meta{color:#555;margin:0 0 8px}
nav a{margin-right:12px;font-size:13px} a.anchor{color:#aaa;text-decoration:none;font-weight:400}
figure{margin:8px 0 18px} figcaption{font-weight:600;margin-bottom:4px} p.note{color:#555;font-size:12px;margin:2px 0}
svg.chart{background:#fff;border:1px solid #e4e4e4} .grid{stroke:#eee} .axis{stroke:#999}
.tick,.legend,.rowlabel,.rowvalue,.bandlabel,.boundarylabel{font-size:11px;fill:#444} .nodata{fill:#888}
.boundarylabel{fill:#AA4499}
.paneltitle{font-size:12px;font-weight:600;fill:#222}
.band{stroke-dasharray:5 4;stroke-width:1.4}
.boundary{stroke-dasharray:2 3;stroke-width:1.5}
.empty{font-size:12px;fill:#888;text-anchor:middle}
table{border-collapse:collapse;margin:6px 0 16px} td,th{border-bottom:1px solid #eee;padding:3px 10px;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
body:has(figure:target) > :not(header):not(figure:target){display:none}
body:has(figure:target) nav{display:none}
"""
