"""Cohorts: which units a selector picks, and their metric values.

A selector is ``KEY=VALUE`` terms (all must hold). Iterations: ``since``/``until``
(the record's date, inclusive), ``rubric`` (the scores under that version; default
the active one), ``session``, ``task``, ``model`` and ``agent`` (the record's
``agent.model`` / ``agent.harness``), ``label`` (``FIELD:VALUE`` of a human label),
``source``, ``iterations`` (``LO-HI``), ``git`` (a revision range such as ``v1..v2`` or
a branch: the iterations whose commit ``git rev-list`` lists; the caller resolves it and
passes the units). Trials: ``run``, ``variant``, ``model``,
``stimulus``, ``eval``, ``experiment``, ``source``, ``since``/``until`` (when the
trial was recorded). Annotated trajectories: ``group`` (the task group), ``task``,
``verdict``, ``failure_mode``, ``format``, ``source``, ``path`` (a glob), ``since``/``until``. A unit is an iteration (``source``, ``iteration``) or a trial's
stimulus (``eval``, ``stimulus``): units that two cohorts share pair them.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

KEYS = {
    "iterations": ("since", "until", "rubric", "session", "task", "model", "agent", "label", "source", "iterations",
                   "git"),
    "trials": ("run", "variant", "model", "stimulus", "eval", "experiment", "source", "since", "until"),
    "annotations": ("group", "task", "verdict", "failure_mode", "format", "source", "path", "since", "until"),
}


class SelectorError(ValueError):
    pass


# each kind's equality keys: the column a value must equal, and the table that holds it
EQUAL = {
    "iterations": {"session": "i.session_id", "task": "i.task_id", "source": "i.source",
                   "model": "json_extract(r.record, '$.agent.model')",
                   "agent": "json_extract(r.record, '$.agent.harness')"},
    "trials": {"run": "t.run_id", "variant": "t.variant", "model": "t.model", "stimulus": "t.stimulus",
               "eval": "t.eval_name", "source": "t.source", "experiment": "r.experiment"},
    "annotations": {"group": "a.task_group", "task": "a.task_id", "verdict": "a.verdict",
                    "failure_mode": "a.failure_mode", "format": "a.format_version", "source": "a.source"},
}
_FROM = {
    "iterations": ("iterations i LEFT JOIN iteration_records r ON r.source = i.source AND r.iteration = i.iteration",
                   "i.date"),
    "trials": ("trials t JOIN events e ON e.seq = t.seq LEFT JOIN runs r ON r.source = t.source"
               " AND r.run_dir = t.run_dir", "e.recorded_at"),
    "annotations": ("trajectories a JOIN events e ON e.seq = a.seq", "e.recorded_at"),
}
_WHEN = re.compile(r"[0-9]{4}(?:-[0-9]{2}(?:-[0-9]{2})?)?")


def checked_when(key: str, value: str) -> str:
    """``since``/``until``: a year, a month, a day (``2026``, ``2026-06``, ``2026-06-30``) or
    an ISO 8601 time, each a real one (``2026-13-45`` and ``zzz`` are refused: compared as
    text they would select everything or nothing without a word)."""
    from datetime import date, datetime

    try:
        if _WHEN.fullmatch(value):
            parts = [int(p) for p in value.split("-")]
            date(parts[0], *(parts[1:] + [1] * (3 - len(parts))))
            return value
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value
    except ValueError:
        raise SelectorError(f"{key}={value!r} is not a date: give YYYY-MM-DD (or YYYY-MM, YYYY, or an ISO 8601 time),"
                            " e.g. since=2026-06-01") from None


def why_empty(conn: sqlite3.Connection, kind: str, sel: dict[str, str], label: str) -> str:
    """One line on why cohort ``label`` (``sel``) holds no unit: the first term whose value
    matches nothing (with the values there are), a date range outside the data, or the
    terms together. An empty cohort is a mistake to say, never a comparison to make."""
    table, when = _FROM[kind]
    terms = ", ".join(f"{k}={v}" for k, v in sel.items()) or "everything"
    for key, column in EQUAL[kind].items():
        if key in sel and not conn.execute(f"SELECT 1 FROM {table} WHERE {column} = ? LIMIT 1",
                                           (sel[key],)).fetchone():
            there = [str(r[0]) for r in conn.execute(f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL"
                                                     f" ORDER BY 1 LIMIT 9")]
            listed = ", ".join(there[:8]) + (", …" if len(there) > 8 else "")
            return (f"cohort {label}: {key}={sel[key]!r} matches no {kind}"
                    + (f" (the {key} values here: {listed})" if there else f" (there are no {kind} here)"))
    if kind == "iterations" and "rubric" in sel and not conn.execute(
            "SELECT 1 FROM scores WHERE rubric_version = ? LIMIT 1", (sel["rubric"],)).fetchone():
        scored = ", ".join(r[0] for r in conn.execute("SELECT DISTINCT rubric_version FROM scores ORDER BY 1"))
        return (f"cohort {label}: rubric={sel['rubric']!r} has scored no iteration here (scored under: {scored or 'none'};"
                f" agentledger backfill --rubric {sel['rubric']} scores them)")
    if "since" in sel or "until" in sel:
        lo, hi = conn.execute(f"SELECT min({when}), max({when}) FROM {table}").fetchone()
        if lo is not None:
            return f"cohort {label} ({terms}) selects no {kind}: the {kind} here are dated {lo[:10]} to {hi[:10]}"
    return f"cohort {label} ({terms}) selects no {kind}"


def parse(kind: str, terms: list[str]) -> dict[str, str]:
    """``["rubric=2.1.0", "since=2026-06-01"]`` → a checked selector."""
    out: dict[str, str] = {}
    for term in terms:
        for part in (p.strip() for p in term.split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or not value.strip():
                raise SelectorError(f"{part!r}: a selector term is KEY=VALUE")
            if key not in KEYS[kind]:
                raise SelectorError(f"{key!r} selects no {kind}; one of: {', '.join(KEYS[kind])}")
            if key in out:
                raise SelectorError(f"{key!r} given twice in one cohort")
            out[key] = checked_when(key, value.strip()) if key in ("since", "until") else value.strip()
    if kind == "iterations" and "iterations" in out and not re.fullmatch(r"\d+-\d+", out["iterations"]):
        raise SelectorError(f"iterations={out['iterations']!r}: give a range LO-HI, e.g. iterations=100-200")
    if kind == "iterations" and "label" in out and ":" not in out["label"]:
        raise SelectorError(f"label={out['label']!r}: give FIELD:VALUE, e.g. label=scope_judgement:breach")
    return out


@dataclass
class Cohort:
    """Each metric's values by unit (a unit missing a value is not in that metric's map)."""

    selector: dict[str, str]
    units: list[tuple] = field(default_factory=list)
    values: dict[str, dict[tuple, list[float]]] = field(default_factory=dict)
    rubric: str | None = None
    unpriced: int = 0  # trials or iterations with no price (no token counts, or an unpriced model)


def _where(sel: dict[str, str], equal: dict[str, str], when: str) -> tuple[list[str], list]:
    """SQL conditions for the selector's equality keys (key -> column) and its
    ``since``/``until`` on the ``when`` column (``until`` a prefix: 2026-06 is all of June)."""
    where, args = ["1"], []
    for key, column in equal.items():
        if key in sel:
            where.append(f"{column} = ?")
            args.append(sel[key])
    if "since" in sel:
        where.append(f"{when} >= ?")
        args.append(sel["since"])
    if "until" in sel:
        where.append(f"substr({when}, 1, length(?)) <= ?")
        args += [sel["until"], sel["until"]]
    return where, args


def iterations(conn: sqlite3.Connection, sel: dict[str, str], active: str | None,
               only: set[tuple] | None = None, prices=None, transcripts=None) -> Cohort:
    """``only``: the units a ``git`` term allows (resolved by the caller, who has git).
    ``prices`` (``cost.Prices``) and ``transcripts`` (source -> its transcript
    directories): also each iteration's cost, where it is priced."""
    rubric = sel.get("rubric") or active
    where, args = _where(sel, EQUAL["iterations"], "i.date")
    where.append("s.rubric_version = ?")
    args.append(rubric)
    if "iterations" in sel:
        lo, hi = (int(v) for v in sel["iterations"].split("-"))
        where.append("i.iteration BETWEEN ? AND ?")
        args += [lo, hi]
    if "label" in sel:
        name, _, value = sel["label"].partition(":")
        where.append("EXISTS (SELECT 1 FROM labels l, json_each(l.outcome, '$.labels') x WHERE l.source = i.source"
                     " AND l.iteration = i.iteration AND CAST(json_extract(x.value, '$.last.' || ?) AS TEXT) = ?)")
        args += [name, value]
    sql = ("SELECT i.source, i.iteration, s.scored, s.value, s.seq FROM iterations i"
           " JOIN scores s ON s.source = i.source AND s.iteration = i.iteration"
           " LEFT JOIN iteration_records r ON r.source = i.source AND r.iteration = i.iteration"
           f" WHERE {' AND '.join(where)} ORDER BY i.source, i.iteration")
    cohort = Cohort(sel, rubric=rubric)
    score: dict[tuple, list[float]] = {}
    seqs = []
    for source, it, scored, value, seq in conn.execute(sql, args):
        unit = (source, it)
        if only is not None and unit not in only:
            continue
        cohort.units.append(unit)
        if scored and value is not None:
            score[unit] = [value]
        seqs.append((seq, unit))
    cohort.values["score"] = score
    # each signal's sub-score where the signal was present, from the score's breakdown
    for start in range(0, len(seqs), 5000):
        chunk = dict(seqs[start:start + 5000])
        rows = conn.execute(
            "SELECT e.seq, json_extract(b.value, '$.signal'), json_extract(b.value, '$.sub_score')"
            " FROM events e, json_each(e.payload, '$.breakdown') b WHERE e.seq IN (SELECT value FROM json_each(?))"
            " AND json_extract(b.value, '$.present')", (str(list(chunk)),))
        for seq, signal, sub in rows:
            if isinstance(sub, (int, float)):
                cohort.values.setdefault(f"signal:{signal}", {})[chunk[seq]] = [float(sub)]
    if prices is not None:
        from .cost import iteration_parts, priced

        cost = cohort.values.setdefault("cost_usd", {})
        for src, it, _, when, _, parts in iteration_parts(conn, rubric or "", transcripts or {}, set(cohort.units)):
            usd = priced(prices, parts, when)
            if usd is None:
                cohort.unpriced += 1
            else:
                cost[(src, it)] = [usd]
    return cohort


TRIAL_METRICS = {  # name -> SQL over a trials row
    "pass_rate": "t.passed",
    "grader_pass_rate": "t.grade_passed",
    "tokens": "coalesce(t.total_tokens, t.input_tokens + t.output_tokens)",  # report.md's tokens
    "duration_ms": "coalesce(t.wall_time_ms, t.duration_ms)",  # report.md's duration: the trajectory's wall time
    "turns": "t.turns",
    "tool_calls": "t.tool_calls",
}


def trials(conn: sqlite3.Connection, sel: dict[str, str], prices=None) -> Cohort:
    """``prices`` (``cost.Prices``): also each trial's cost, where its model is priced."""
    where, args = _where(sel, EQUAL["trials"], "e.recorded_at")
    cols = ", ".join(TRIAL_METRICS.values())
    sql = (f"SELECT t.eval_name, t.stimulus, {cols}, t.model, t.input_tokens, t.output_tokens, t.cache_read_tokens,"
           f" t.cache_write_tokens, e.recorded_at FROM trials t JOIN events e ON e.seq = t.seq"
           " LEFT JOIN runs r ON r.source = t.source AND r.run_dir = t.run_dir"
           f" WHERE {' AND '.join(where)} ORDER BY t.eval_name, t.stimulus, t.trial_index, t.run_id")
    cohort = Cohort(sel)
    names = list(TRIAL_METRICS)
    if prices is not None:
        from .cost import trial_cost
    seen = set()
    for row in conn.execute(sql, args):
        unit = (row[0], row[1])
        if unit not in seen:
            seen.add(unit)
            cohort.units.append(unit)
        for name, value in zip(names, row[2:2 + len(names)]):
            if value is not None:
                cohort.values.setdefault(name, {}).setdefault(unit, []).append(float(value))
        if prices is not None:
            usd = trial_cost(prices, *row[2 + len(names):])
            if usd is None:
                cohort.unpriced += 1
            else:
                cohort.values.setdefault("cost_usd", {}).setdefault(unit, []).append(usd)
    return cohort



def annotations(conn: sqlite3.Connection, sel: dict[str, str]) -> Cohort:
    """Annotated trajectories: a unit is a task id (its path when it has none); metrics
    are the score (normalised to 0–1), iterations, wall time, and one pass/fail share
    per failure mode (``failure_mode:NAME``)."""
    where, args = _where(sel, EQUAL["annotations"], "e.recorded_at")
    if "path" in sel:
        where.append("a.path GLOB ?")
        args.append(sel["path"])
    cohort = Cohort(sel)
    rows = conn.execute(
        "SELECT coalesce(a.task_id, a.path), coalesce(a.score_norm, a.score), a.iterations, a.wall_time_ms,"
        " a.failure_mode FROM trajectories a JOIN events e ON e.seq = a.seq"
        f" WHERE {' AND '.join(where)} ORDER BY 1, a.path", args).fetchall()
    modes = [r[0] for r in conn.execute("SELECT DISTINCT failure_mode FROM trajectories WHERE failure_mode"
                                        " IS NOT NULL AND failure_mode <> '' ORDER BY 1")]  # both cohorts' list
    seen: set[tuple] = set()
    for task, score, iterations_, wall, mode in rows:
        unit = (task,)
        if unit not in seen:
            seen.add(unit)
            cohort.units.append(unit)
        for name, value in (("score", score), ("iterations", iterations_), ("wall_time_ms", wall)):
            if isinstance(value, (int, float)):
                cohort.values.setdefault(name, {}).setdefault(unit, []).append(float(value))
        for m in modes:
            cohort.values.setdefault(f"failure_mode:{m}", {}).setdefault(unit, []).append(float(mode == m))
    return cohort

