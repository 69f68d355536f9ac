"""The pure scorer: worked examples, signal rules, human labels, and a property test."""

from __future__ import annotations

import pytest
from agentledger.model import HookOutcomes, HookRecord, Record
from agentledger.scoring import rubric as R
from agentledger.scoring.combine import combine
from agentledger.scoring.inputs import ScoringInputs
from agentledger.scoring.signals import SignalValue, absent, correction_pressure, hook_outcomes, human_label, present
from agentledger.sources.iterlogs.sidefiles import parse_hook_outcomes, parse_labels
from hypothesis import given, settings
from hypothesis import strategies as st


def values(rubric: R.Rubric, **subs: float) -> dict[str, SignalValue]:
    return {s.id: (present(subs[s.id], "") if s.id in subs else absent("x")) for s in rubric.signals}


def test_worked_examples_2_1_0_and_3_0_0() -> None:
    r21, r30, r20 = R.load("2.1.0"), R.load("2.1.0"), R.load("2.0.2")
    clean = dict(landed=1, verifier=1, tests=1, correction_pressure=1, scope=1)
    scored, value, band, rows = combine(r21, values(r21, **clean))
    assert (value, band) == (1.0, "excellent")
    assert [r.effective_weight for r in rows if r.present] == [
        0.24691358024691357, 0.2222222222222222, 0.20987654320987653, 0.16049382716049382, 0.16049382716049382]
    struggling = dict(landed=0, verifier=0, tests=0, correction_pressure=0.25, scope=0.5, hook_outcomes=0,
                      token_efficiency=0.6)
    assert abs(combine(r21, values(r21, **struggling))[1] - 0.1515) < 1e-12
    assert abs(combine(r20, values(r20, **struggling))[1] - 0.1725) < 1e-12
    r30 = R.load("3.0.0")
    assert combine(r30, values(r30, **struggling))[1] == 0.1535294117647059
    assert combine(r30, values(r30, **struggling, human_label=0.0))[1] == 0.13050000000000003
    labelled = combine(r30, values(r30, **clean, human_label=0.8333333333333333))
    assert labelled[1] == 0.9698795180722891
    assert [r.effective_weight for r in labelled[3] if r.signal == "human_label"] == [0.18072289156626506]


def test_unscored_when_nothing_present() -> None:
    rub = R.load("2.1.0")
    scored, value, band, rows = combine(rub, values(rub))
    assert (scored, value, band) == (False, 0.0, "unscored") and len(rows) == 7


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["2.0.2", "2.1.0", "3.0.0"]),
       st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=8, max_size=8))
def test_contributions_of_present_signals_sum_to_the_value(version: str, subs: list) -> None:
    rub = R.load(version)
    vals = {s.id: (absent("a") if subs[i] is None else present(subs[i], "p")) for i, s in enumerate(rub.signals)}
    scored, value, band, rows = combine(rub, vals)
    total = 0.0
    for row in rows:
        if row.present:
            total += row.contribution
        else:
            assert row.contribution == 0 and row.effective_weight == 0 and row.sub_score == 0
    assert total == value  # the same sum, in rubric order
    if scored:
        assert abs(sum(r.effective_weight for r in rows) - 1.0) < 1e-9
        assert 0.0 <= value <= 1.0 + 1e-12 and band == rub.band(value)
    else:
        assert all(v is None for v in subs[: len(rub.signals)])


def _x(**kw) -> ScoringInputs:
    return ScoringInputs(record=kw.pop("record", Record(iteration=7)), **kw)


def test_correction_pressure_ieee_edge_cases() -> None:
    from agentledger.model import Impl

    assert correction_pressure(_x(record=Record(impl=Impl(retries=-1)))).sub_score == 1.0  # 1/0 -> +Inf -> 1
    v = correction_pressure(_x(record=Record(impl=Impl(retries=-2))))
    assert v.sub_score == 0.0 and v.detail == "-2 retries, 0 user corrections"
    from agentledger.scoring.inputs import TranscriptTotals

    v = correction_pressure(_x(transcript=TranscriptTotals(tool_results=3, tool_errors=1)))
    assert v.detail == "0 retries, 0 user corrections, 33% tool-error rate"


def test_hook_outcomes_d4_collapse_and_bands() -> None:
    rec = lambda cls, result, rule, corr="c1": HookRecord(cls, result, rule, corr)  # noqa: E731
    h = HookOutcomes(records=(rec("remediate_at_stop", "remediate", "iteration-close.R1.1"),
                              rec("remediate_at_stop", "advise", "iteration-close.R1.4")))
    assert hook_outcomes(_x(hook=h)) == present(0.0, "remediate: iteration-close.R1.1")
    h = HookOutcomes(records=(rec("prevent_before_action", "allow", "r1"), rec("prevent_before_action", "advise", "r1")))
    assert hook_outcomes(_x(hook=h)) == present(0.6, "advise: r1")
    h = HookOutcomes(records=(rec("prevent_before_action", "allow", "r2", ""), rec("prevent_before_action", "allow", "r2", ""),
                              rec("remediate_at_stop", "allow", "r1")))
    assert hook_outcomes(_x(hook=h)) == present(1.0, "allow: r1, r2 (3 records)")
    h = HookOutcomes(records=(rec("continuity_advice", "remediate", "r"),))
    assert hook_outcomes(_x(hook=h)).detail.startswith("no scored hook-outcome records for iter-7")
    assert hook_outcomes(_x()).detail == "no hook-outcomes sidecar for iter-7"


def test_hook_sidecar_type_errors_are_go_texts() -> None:
    text = ("schema_version: 1\nrecords:\n    - intervention_class: remediate_at_stop\n      result: remediate\n"
            "      rule_id:\n          a: b\n      correlation_id: definitely-wrong-shape\n")
    parsed = parse_hook_outcomes(text)
    assert parsed.error == "yaml: unmarshal errors:\n  line 6: cannot unmarshal !!map into string"
    assert hook_outcomes(_x(hook=parsed)).detail == (
        "cannot parse hook-outcomes sidecar for iter-7: yaml: unmarshal errors:\n"
        "  line 6: cannot unmarshal !!map into string")
    parsed = parse_hook_outcomes("records: definitely-wrong\n")
    assert parsed.error.endswith("line 1: cannot unmarshal !!str `definit...` into []scoring.hookOutcomeRecord")
    assert parse_hook_outcomes("").records == () and parse_hook_outcomes("").error == ""


LABEL = """    - id: {id}
      iteration: 5
      actor: {actor}
      role: {role}
{override}      schema_version: {schema}
      created_at: {ts}
      updated_at: {ts}
      history:
        - actor: {actor}
          role: {role}
          timestamp: {ts}
          structured:
            correctness: {c}
            scope_judgement: {s}
            hallucination: {h}
"""


def labels_file(*labels: dict, schema: str = "1.0.0") -> str:
    body = "".join(LABEL.format(**{"id": f"id{i}", "role": "reviewer", "override": "", "schema": "1.0.0",
                                   "ts": "2026-05-28T09:00:00Z", **lb}) for i, lb in enumerate(labels))
    return f"iteration: 5\nschema_version: {schema}\nlabels:\n{body}"


def hl(text: str):
    return human_label(_x(record=Record(iteration=5), labels=parse_labels(text, 5)))


def test_human_label_conformance_vectors() -> None:
    a = dict(actor="alice@example.com", c=3, s="on-target", h="none")
    b = dict(actor="bob@example.com", c=0, s="breach", h="major")
    assert hl(labels_file(a, b)) == present(0.5, "mean of 2 latest label(s) by alice@example.com, bob@example.com")
    admin = dict(actor="admin@example.com", role="admin", override="      admin_override: true\n", c=0, s="breach", h="major")
    assert hl(labels_file(a, b, admin)) == present(0.0, "admin override by admin@example.com")
    older = dict(actor="rev@example.com", c=0, s="breach", h="major", ts="2026-05-28T12:05:00Z")
    newer = dict(actor="rev@example.com", c=3, s="on-target", h="none", ts="2026-05-28T12:00:00Z")
    assert hl(labels_file(older, newer)).sub_score == 0.0  # the later updated_at wins, not file order
    assert hl(labels_file(a, schema="2.0.0")).detail == \
        'unsupported label schema "2.0.0" for iter-5 (this rubric scores major 1 only)'
    assert hl(labels_file(dict(a, schema="3"))).detail.startswith('unsupported label schema "3"')
    assert hl("iteration: 5\nschema_version: 2.0.0\nlabels: []\n").detail == "no human labels for iter-5"
    assert hl("{").detail.startswith("cannot read labels sidecar for iter-5: labels: parse iter-5 sidecar:")
    assert hl(labels_file(dict(a, role="boss"))).detail == (
        'cannot read labels sidecar for iter-5: labels: invalid iter-5 sidecar: labels: invalid role: "boss"')
    assert hl(labels_file(dict(a, c=1, s="partial", h="minor"))).sub_score == 0.4444444444444444
    assert human_label(_x(record=Record(iteration=7))).detail == "no human labels for iter-7"


# -- the data model's JSON form, decoded ------------------------------------------------
def _built(cls: type, data: dict) -> object:
    """What the dataclass's own ``__init__`` builds from ``data`` (the JSON form): each
    field present converted back by its type (None stays None), the absent ones left to
    their defaults, other keys ignored. The reference ``from_jsonable`` must agree with."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    return cls(**{f.name: None if data[f.name] is None else _converted(hints[f.name], data[f.name])
                  for f in dataclasses.fields(cls) if f.name in data})


def _converted(tp: object, v: object) -> object:
    import dataclasses
    import types
    import typing

    from agentledger.jsonnum import decode_float

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _converted(args[0], v) if len(args) == 1 else v
    if origin is tuple:
        args = typing.get_args(tp)
        inner = [args[0]] * len(v) if len(args) == 2 and args[1] is Ellipsis else args
        return tuple(None if x is None else _converted(a, x) for a, x in zip(inner, v))
    if dataclasses.is_dataclass(tp):
        return _built(tp, v)
    return decode_float(v) if tp is float else v


def _json_form(tp: object, depth: int = 0) -> st.SearchStrategy:
    """JSON forms of ``tp`` with any field left out or null, and a key that is no field."""
    import dataclasses
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[_json_form(a, depth) for a in typing.get_args(tp) if a is not type(None)])
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(st.none() | _json_form(args[0], depth + 1), max_size=2 if depth < 2 else 0)
        return st.tuples(*[_json_form(a, depth + 1) for a in args]).map(list)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = {f.name: st.none() | _json_form(hints[f.name], depth + 1) for f in dataclasses.fields(tp)}
        return st.fixed_dictionaries({}, optional={**fields, "not_a_field": st.integers()})
    return {str: st.text(max_size=5), int: st.integers(), bool: st.booleans(),
            float: st.floats(allow_nan=False) | st.sampled_from(["NaN", "+Inf", "-Inf"]) | st.integers()}[tp]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_records_decode_as_the_dataclasses_would_build_them(data) -> None:
    """``from_jsonable`` makes its instances without calling ``__init__`` (a function made
    for each class): for every class of the model, any JSON form (fields left out, null,
    nested, unknown keys) gives what the class's own ``__init__`` builds, attributes in
    the same order; a record's ``to_json`` comes back as the same record."""
    import dataclasses

    from agentledger import model

    classes = [v for v in vars(model).values() if isinstance(v, type) and dataclasses.is_dataclass(v)]
    cls = data.draw(st.sampled_from(classes))
    form = data.draw(_json_form(cls))
    got, want = model.from_jsonable(cls, form), _built(cls, form)

    def same(a: object, b: object) -> bool:  # NaN is no NaN's equal: compare the reprs' floats too
        return repr(a) == repr(b) and (a == b or "nan" in repr(a))

    assert type(got) is cls and same(got, want) and list(vars(got)) == list(vars(want))
    assert not any(isinstance(x, list) for x in vars(got).values())
    if cls is Record:
        assert same(Record.from_json(got.to_json()), got)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_made_objects_are_the_dataclasses_own(data) -> None:
    """The scorer makes its rows, signal values, integrity pairs and scores with
    ``model.maker`` (no ``__init__``): each is what the class builds from the same
    fields: equal, same hash, same attributes in the same order, pickled alike."""
    import dataclasses
    import pickle

    from agentledger.model import maker
    from agentledger.scoring.breakdown import Row
    from agentledger.scoring.combine import IntegrityPair, Score
    from agentledger.scoring.signals import SignalValue

    cls = data.draw(st.sampled_from([Row, SignalValue, IntegrityPair, Score]))
    scalar = st.one_of(st.text(max_size=5), st.floats(allow_nan=False), st.booleans(), st.integers())
    args = [data.draw(scalar) for _ in dataclasses.fields(cls)]
    got, want = maker(cls)(*args), cls(*args)
    assert type(got) is cls and got == want and hash(got) == hash(want) and repr(got) == repr(want)
    assert list(vars(got).items()) == list(vars(want).items())
    assert pickle.loads(pickle.dumps(got)) == want
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.__setattr__(dataclasses.fields(cls)[0].name, args[0])
    with pytest.raises(TypeError, match="defaults"):  # what it would not build as ``__init__`` does
        maker(Record)
