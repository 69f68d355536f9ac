"""Signals → breakdown → value and band (spec §6–§8), and the integrity track.

``score`` is the one entry point: a pure function of (rubric, inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Record, maker
from .breakdown import Row
from .inputs import ScoringInputs
from .rubric import Rubric
from .signals import MEASURES, SignalValue, absent, present, scope, scope_objective, scope_self_reported


@dataclass(frozen=True)
class IntegrityPair:
    signal: str
    role: str
    claimed: SignalValue
    observed: SignalValue
    comparable: bool
    delta: float


@dataclass(frozen=True)
class Score:
    iteration: int
    rubric_version: str
    scored: bool
    value: float
    band: str
    breakdown: tuple[Row, ...]
    integrity: tuple[IntegrityPair, ...]
    linked_traces: bool  # some verifier links traces (the record-aware writer's marker)


# made without the dataclasses' __init__, ~27 objects a score (``model.maker``)
_row, _pair, _score = maker(Row), maker(IntegrityPair), maker(Score)


def combine(rubric: Rubric, values: dict[str, SignalValue]) -> tuple[bool, float, str, tuple[Row, ...]]:
    """Weighted mean renormalised over present signals, in rubric order (bit-exact)."""
    total = 0.0
    for s in rubric.signals:
        if values[s.id].present:
            total += s.weight
    rows = []
    value = 0.0
    for s in rubric.signals:
        v = values[s.id]
        if not v.present or total == 0:
            rows.append(_row(s.id, s.label, v.present, 0.0, v.detail, s.weight, 0.0, 0.0))
            continue
        effective = s.weight / total
        contribution = effective * v.sub_score
        value += contribution
        rows.append(_row(s.id, s.label, True, v.sub_score, v.detail, s.weight, effective, contribution))
    if total == 0:
        return False, 0.0, "unscored", tuple(rows)
    return True, value, rubric.band(value), tuple(rows)


def score(rubric: Rubric, x: ScoringInputs) -> Score:
    objective = scope_objective(x)  # the scope signal's and the integrity track's (its dearest part)
    values = {sid: MEASURES[sid](x) if sid != "scope" else scope(x, objective) for sid in rubric.ids}
    scored, value, band, rows = combine(rubric, values)
    for sid in ("landed", "verifier", "tests"):  # the integrity track needs these in any rubric
        if sid not in values:
            values[sid] = MEASURES[sid](x)
    return _score(x.record.iteration, rubric.version, scored, value, band, rows, integrity(x, values, objective),
                  any(v.linked_traces for v in x.record.verifiers))


# -- integrity track (§8): claimed vs observed, never persisted in sidecars ----------
_DECISION = {"accept": 1.0, "reject": 0.0, "escalate": 0.5}


def landed_claimed(r: Record) -> SignalValue:
    parts: list[float] = []
    details: list[str] = []
    pv = r.impl.self_assessment.persisted_via_workflow_commands.strip().lower()
    if pv:
        yes = "yes" in pv
        parts.append(1.0 if yes else 0.0)
        details.append(f"persisted_via_workflow_commands: {'yes' if yes else 'no'}")
    decision = r.review.overall_decision.strip().lower()
    if decision in _DECISION:
        parts.append(_DECISION[decision])
        details.append(f"review: {decision}")
    if not parts:
        return absent("no persisted-via-workflow note and no review decision")
    return present(sum(parts) / len(parts), "; ".join(details))


def diligence_claimed(r: Record) -> SignalValue:
    linked = (r.impl.self_assessment.linked_traces_to_outcomes
              or any(v.self_assessment.linked_traces_to_outcomes for v in r.verifiers)
              or any(v.linked_traces for v in r.verifiers))
    structured = any(v.tests_added_by_kind or v.linked_traces for v in r.verifiers)
    if not linked and r.impl.self_assessment.is_default() and not structured:
        return absent("no verification self-report")
    return present(1.0, "linked traces recorded") if linked else present(0.0, "no linked traces recorded")


def integrity(x: ScoringInputs, values: dict[str, SignalValue] | None = None,
              objective: SignalValue | None = None) -> tuple[IntegrityPair, ...]:
    r = x.record
    v = values or {}
    verifier_v = v.get("verifier") or MEASURES["verifier"](x)
    pairs = (
        ("landed", "impl", landed_claimed(r), v.get("landed") or MEASURES["landed"](x)),
        ("verifier", "verifier", diligence_claimed(r), verifier_v),
        ("tests", "impl", v.get("tests") or MEASURES["tests"](x), verifier_v),
        ("scope", "impl", scope_self_reported(x), objective or scope_objective(x)),
    )
    out = []
    for signal, role, claimed, observed in pairs:
        if not claimed.present and not observed.present:
            continue
        comparable = claimed.present and observed.present
        out.append(_pair(signal, "impl" if r.schema_version == 1 else role, claimed, observed, comparable,
                         observed.sub_score - claimed.sub_score if comparable else 0.0))
    return tuple(out)


def inconsistency(payload: dict) -> str | None:
    """Why a ``score.computed`` payload is not what this rubric makes of its own
    breakdown (None when it is): the rubric is known, the rows are its signals in
    its order with its weights, and combining their sub-scores again gives the same
    rows, value, band and ``scored``, bit for bit. An edited value, band, weight or
    contribution is caught; a consistently forged sub-score is not (only rescoring
    from the inputs can tell: ``ledger/`` rescores every imported score before any
    sidecar is written from it)."""
    from ..jsonnum import decode_float
    from .rubric import UnknownRubric, load

    try:
        rubric = load(payload["rubric_version"])
    except UnknownRubric:
        return f"rubric {payload.get('rubric_version')!r} is unknown here"
    rows = payload.get("breakdown") or []
    if [r.get("signal") for r in rows] != list(rubric.ids):
        return f"its breakdown is not rubric {rubric.version}'s signals in order"
    try:
        values = {r["signal"]: SignalValue(bool(r["present"]), decode_float(r["sub_score"]), r["detail"])
                  for r in rows}
        scored, value, band, again = combine(rubric, values)
        if (scored, band) != (payload["scored"], payload["band"]) or not _same(value, decode_float(payload["value"])):
            return "its value, band or scored flag is not what its breakdown gives"
        for row, want in zip(rows, again):
            got = (row["present"], decode_float(row["nominal_weight"]), decode_float(row["effective_weight"]),
                   decode_float(row["contribution"]), row["label"])
            if got[0] != want.present or got[4] != want.label or not all(
                    _same(a, b) for a, b in zip(got[1:4], (want.nominal_weight, want.effective_weight,
                                                          want.contribution))):
                return f"its {row['signal']} row is not what rubric {rubric.version} makes of it"
    except (KeyError, TypeError, ValueError) as exc:
        return f"its breakdown is malformed ({type(exc).__name__}: {exc})"
    return None


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # bit-exact, NaN equal to NaN
