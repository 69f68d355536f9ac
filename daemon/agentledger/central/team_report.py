"""``agentledger report --central``: the team report, drawn by the same charts as a
machine's own (``views/report.py``) from the team ledger's tables, plus how each
machine and each repository is doing.

What changes for a team: iterations from many machines have no common order, so
trends and "newest first" follow the time a score was computed; a session or a
repository is named with the machine it ran on (``box-1:repo``); and the team has
no single active rubric, so the charts use the rubric most current scores are
under (the others still count in every mean).
"""

from __future__ import annotations

from ..views import report, stats


def _repo(source: str) -> str:
    """The repository's directory name for an iteration-log path (…/repo/.agents/active/iteration-log)."""
    parts = source.rstrip("/").split("/")
    if parts[-3:] == [".agents", "active", "iteration-log"] and len(parts) > 3:
        return parts[-4]
    return parts[-1] or source


def gather(pg, *, since: str | None = None, session: str | None = None) -> report.Data:
    from ..scoring import rubric as rubrics

    d = report.Data(session=session, since=since)
    row = pg.execute("SELECT rubric_version FROM agentledger.score_latest GROUP BY 1 ORDER BY count(*) DESC, 1 DESC"
                     " LIMIT 1").fetchone()
    d.rubric = row[0] if row else ""
    if d.rubric:
        try:
            active = rubrics.load(d.rubric)
            d.bands = [(n, lo) for n, lo in active.bands if lo > float("-inf")]
            d.band_names = [n for n, _ in active.bands]
            d.signals = list(active.ids)
        except rubrics.UnknownRubric:  # a newer machine's rubric: draw without its bands
            pass
    cond, args = [], []
    if session:
        cond.append("i.session_id = %s")
        args.append(session)
    if since:
        cond.append("s.scored_at >= %s::timestamptz")
        args.append(since)
    where = "".join(f" AND {c}" for c in cond)
    rows = pg.execute(
        "SELECT s.iteration, s.value, s.band, s.rubric_version, coalesce(i.session_id, ''), l.name, s.source,"
        " extract(epoch FROM s.scored_at), s.ledger_id::text, s.seq"
        " FROM agentledger.score_latest s JOIN agentledger.ledgers l USING (ledger_id)"
        " LEFT JOIN agentledger.iterations i USING (ledger_id, source, iteration)"
        " WHERE true" + where + " ORDER BY s.scored_at, s.ledger_id, s.seq", args).fetchall()
    d.latest = [(it, v, band, rv, sess, f"{name}:{_repo(src)}", when) for it, v, band, rv, sess, name, src, when, *_
                in rows]
    d.first_scores = [(f"{name}:{it}", v, rv, sess, f"{name}:{_repo(src)}") for it, v, band, rv, sess, name, src, *_
                      in rows if v is not None]
    keys = {(lid, seq): (f"{name}:{_repo(src)}", it) for it, _, _, _, _, name, src, _, lid, seq in rows}
    for lid, seq, signal, present, sub, contribution in pg.execute(
            "SELECT s.ledger_id::text, s.seq, r->>'signal', (r->>'present')::boolean,"
            " (r->>'sub_score')::double precision, (r->>'contribution')::double precision"
            " FROM agentledger.score_latest s JOIN agentledger.events e ON e.ledger_id = s.ledger_id AND e.seq = s.seq,"
            " jsonb_array_elements(e.payload->'breakdown') AS r"):
        key = keys.get((lid, seq))
        if key is not None and present:
            d.sub_scores.setdefault(key, {})[signal] = (sub or 0.0, contribution or 0.0)
    for name, src, sess, tin, tout in pg.execute(
            "SELECT l.name, i.source, i.session_id, sum(i.input_tokens), sum(i.output_tokens)"
            " FROM agentledger.iterations i JOIN agentledger.ledgers l USING (ledger_id)"
            " WHERE i.input_tokens IS NOT NULL GROUP BY 1, 2, 3"):
        d.tokens[(f"{name}:{_repo(src)}", sess)] = (int(tin or 0), int(tout or 0))
    d.integrity = [tuple(r) for r in pg.execute(
        "SELECT p->>'role', p->>'signal', round(avg((p->'claimed'->>'sub_score')::numeric), 4)::float8,"
        " round(avg((p->'observed'->>'sub_score')::numeric), 4)::float8, count(*)"
        " FROM agentledger.score_latest s JOIN agentledger.events e ON e.ledger_id = s.ledger_id AND e.seq = s.seq,"
        " jsonb_array_elements(e.payload->'integrity') AS p"
        " WHERE (p->>'comparable')::boolean AND s.rubric_version = %s GROUP BY 1, 2 ORDER BY 1, 2", (d.rubric,))]
    d.quarantine = [tuple(r) for r in pg.execute(
        "SELECT kind, count(*) FILTER (WHERE resolved_seq IS NULL), count(*) FILTER (WHERE resolved_seq IS NOT NULL)"
        " FROM agentledger.quarantine GROUP BY kind ORDER BY kind")]
    d.pass_rates = [tuple(r) for r in pg.execute(
        "SELECT eval_name, model, count(*), count(*) FILTER (WHERE passed) FROM agentledger.trials"
        " GROUP BY 1, 2 ORDER BY 1, 2")]
    d.groups = {"machine": _groups(d, lambda r: r[5].split(":", 1)[0]),
                "repository": _groups(d, lambda r: r[5])}
    return d


def _groups(d: report.Data, key) -> list[tuple[str, stats.Summary, dict[str, int]]]:
    """(name, summary of its current scores, band counts) per machine or repository."""
    values: dict[str, list[float]] = {}
    bands: dict[str, dict[str, int]] = {}
    for r in d.latest:
        k = key(r)
        if r[1] is not None:
            values.setdefault(k, []).append(r[1])
        counts = bands.setdefault(k, {})
        counts[r[2]] = counts.get(r[2], 0) + 1
    return sorted(((k, stats.summary(v), bands[k]) for k, v in values.items()), key=lambda g: g[0])
