"""The normalised shapes that travel from sources, through events, to the scorer.

Plain frozen dataclasses: sources build them, event payloads carry them as
JSON (``to_json``/``from_json``), projections store that JSON, and the scorer
reads them back. Keeping one shape for all three is what lets ``rebuild`` and
``backfill`` rescore from the ledger without touching the original files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .jsonnum import INT64_MAX, INT64_MIN, decode_float, encode_float, is_int64  # noqa: F401 - model's names too

Tri = bool | None  # the reference's OptionalBool: unset / false / true


@dataclass(frozen=True)
class SelfAssessment:
    read_loop_state: bool = False
    one_item_only: Tri = None
    committed_after_tests: bool = False
    aligned_with_canonical_tasks: Tri = None
    persisted_via_workflow_commands: str = ""
    ran_cli_command: bool = False
    exercised_new_scenario: bool = False
    tests_positive_and_negative: bool = False
    tests_used_sandbox: bool = False
    cli_produced_actionable_feedback: str = ""
    linked_traces_to_outcomes: bool = False
    stayed_under_10_files: bool = False
    no_destructive_commands: Tri = None
    scoped_tests_to_write_scope: Tri = None
    tdd_refresh_performed: bool = False

    def is_default(self) -> bool:
        return self == _NO_SELF_ASSESSMENT


_NO_SELF_ASSESSMENT = SelfAssessment()  # made once: asked of every record scored (~3 us a score to make one)


@dataclass(frozen=True)
class Agent:
    session_id: str = ""
    harness: str = ""
    model: str = ""


@dataclass(frozen=True)
class SessionTokens:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_hit_rate: float = 0.0


@dataclass(frozen=True)
class Impl:
    summary: str = ""
    scope_note: str = ""
    retries: int = 0
    focused_tests_added: int = 0
    focused_tests_pass: Tri = None
    tests_total_pass: Tri = None  # v1 only
    self_assessment: SelfAssessment = field(default_factory=SelfAssessment)


@dataclass(frozen=True)
class TestByKind:
    name: str = ""
    kind: str = ""


@dataclass(frozen=True)
class LinkedTrace:
    trace_ref: str = ""
    outcome_ref: str = ""


@dataclass(frozen=True)
class Verifier:
    type: str = ""
    status: str = ""
    gate_passed: bool = False
    tests_added: int = 0
    tests_total_pass: Tri = None
    retries: int = 0
    result_artifact: str = ""
    self_assessment: SelfAssessment = field(default_factory=SelfAssessment)
    tests_added_by_kind: tuple[TestByKind, ...] = ()
    linked_traces: tuple[LinkedTrace, ...] = ()


@dataclass(frozen=True)
class Review:
    phase_1_decision: str = ""
    phase_2_decision: str = ""
    overall_decision: str = ""
    failed_gates: tuple[str, ...] = ()
    decision_artifact: str = ""


@dataclass(frozen=True)
class Record:
    """One iteration, v1 and v2 normalised into the reference's record shape."""

    schema_version: int = 1
    iteration: int = 0
    date: str = ""
    wave: str = ""
    task_id: str = ""
    commit: str = ""
    files_changed: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    first_commit: str = ""
    checkpoint_at: str = ""
    agent: Agent = field(default_factory=Agent)
    session_tokens: SessionTokens | None = None
    impl: Impl = field(default_factory=Impl)
    verifiers: tuple[Verifier, ...] = ()
    review: Review = field(default_factory=Review)

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return from_jsonable(cls, data)


# -- JSON round trip (floats JSON cannot hold: jsonnum.py) ---------------------
_SCALARS = (str, int, bool, type(None))
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_jsonable(obj: Any) -> Any:
    t = type(obj)
    if t in _SCALARS:
        return obj
    if t is float:
        return encode_float(obj)
    if t is tuple or t is list:
        return [to_jsonable(x) for x in obj]
    names = _FIELD_NAMES.get(t)
    if names is None:
        if not dataclasses.is_dataclass(obj):
            return obj
        names = _FIELD_NAMES[t] = tuple(f.name for f in dataclasses.fields(obj))
    return {n: to_jsonable(getattr(obj, n)) for n in names}


_DECODERS: dict[type, Any] = {}
_ABSENT = object()


def from_jsonable(cls: type, data: dict[str, Any]) -> Any:
    """Inverse of ``to_jsonable`` for the dataclasses above: what ``cls(**kw)`` gives,
    ``kw`` holding each field ``data`` has, converted back (a None stays None); a field
    absent from ``data`` takes its default, a key that is no field is ignored."""
    return (_DECODERS.get(cls) or _decoder(cls))(data)


def _decoder(cls: type) -> Any:
    """``from_jsonable`` for ``cls``: every record a pass scores is decoded in a worker,
    and calling a frozen dataclass's ``__init__`` (an ``object.__setattr__`` a field)
    cost a third of decoding one. The instance is made with ``object.__new__`` and its
    ``__dict__`` filled in field order, as ``__init__`` fills it (these classes have no
    ``__post_init__``: ``test_records_decode_as_the_dataclasses_would_build_them``)."""
    import typing

    hints = typing.get_type_hints(cls)
    spec = tuple((f.name, _converter(hints[f.name]), f.default,
                  None if f.default_factory is dataclasses.MISSING else f.default_factory)
                 for f in dataclasses.fields(cls))
    new, absent, missing = object.__new__, _ABSENT, dataclasses.MISSING

    def decode(data: dict[str, Any]) -> Any:
        values = {}
        for name, conv, default, factory in spec:
            v = data.get(name, absent)
            if v is absent:
                if factory is not None:
                    v = factory()
                elif default is missing:  # none here; absent, it is an error, as for ``__init__``
                    raise TypeError(f"{cls.__name__}: {name!r} is missing")
                else:
                    v = default
            elif conv is not None and v is not None:
                v = conv(v)
            values[name] = v
        o = new(cls)
        o.__dict__.update(values)
        return o

    _DECODERS[cls] = decode
    return decode


def maker(cls: type) -> Callable[..., Any]:
    """``cls(*fields)`` for a frozen dataclass with no defaults and no ``__post_init__``,
    made the way ``_decoder`` makes an instance: ``object.__new__`` and its ``__dict__``,
    in field order, set at once. The scorer makes ~27 such objects a score (signal values,
    breakdown rows, integrity pairs); the dataclass's ``__init__`` spends an
    ``object.__setattr__`` a field (~0.9 us an object here, against ~0.45).
    ``test_made_objects_are_the_dataclasses_own`` compares the two."""
    names = [f.name for f in dataclasses.fields(cls)]  # the class's own identifiers, nothing read
    if hasattr(cls, "__post_init__") or any(f.default is not dataclasses.MISSING or f.default_factory is not
                                            dataclasses.MISSING for f in dataclasses.fields(cls)):
        raise TypeError(f"maker: {cls.__name__} has defaults or a __post_init__")
    fill = ", ".join(f"{n!r}: {n}" for n in names)
    namespace = {"new": object.__new__, "put": object.__setattr__, "cls": cls}
    exec(f"def make({', '.join(names)}):\n    o = new(cls)\n    put(o, '__dict__', {{{fill}}})\n    return o\n",
         namespace)
    return namespace["make"]


def warm() -> None:
    """Every dataclass's decoder, now: a process that forks a child a request
    (``cli/served.py``) makes them once, not in each child."""
    for value in list(globals().values()):
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value not in _DECODERS:
            _decoder(value)


def _converter(tp: Any) -> Any:
    """A function turning the JSON form of type ``tp`` (not None) back into it; None when
    that form is the value itself."""
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _converter(args[0]) if len(args) == 1 else None
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            inner = _converter(args[0])
            if inner is None:
                return tuple
            return lambda v: tuple([inner(x) if x is not None else None for x in v])
        fns = [_converter(a) or (lambda x: x) for a in args]
        return lambda v: tuple(fn(x) if x is not None else None for fn, x in zip(fns, v))
    if dataclasses.is_dataclass(tp):
        return _DECODERS.get(tp) or _decoder(tp)
    if tp is float:
        return decode_float
    return None


# -- side files ----------------------------------------------------------------
@dataclass(frozen=True)
class HookRecord:
    intervention_class: str = ""
    result: str = ""
    rule_id: str = ""
    correlation_id: str = ""


@dataclass(frozen=True)
class HookOutcomes:
    """``iter-N.hook-outcomes.yaml`` as the scorer sees it: records, or the error text."""

    records: tuple[HookRecord, ...] = ()
    error: str = ""  # "cannot parse …"/"cannot read …" detail tail when non-empty
    read_error: bool = False


@dataclass(frozen=True)
class Judgement:
    correctness: int = 0
    scope_judgement: str = ""
    hallucination: str = ""


@dataclass(frozen=True)
class Label:
    id: str = ""
    actor: str = ""
    admin_override: bool = False
    schema_version: str = ""
    updated_at: str = ""  # ISO-8601 UTC, microseconds; compared as instants
    last: Judgement = field(default_factory=Judgement)


@dataclass(frozen=True)
class Labels:
    """``iter-N.labels.yaml``: validated labels, or the reader's error text."""

    schema_version: str = ""
    labels: tuple[Label, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class Artifact:
    """A file a record points at (verifier result, review decision) or a plan's TASKS.yaml."""

    kind: str = ""  # verifier_result | review_decision | tasks
    available: bool = False
    status: str = ""  # verifier_result
    corrections: int = 0  # review_decision: len(user_corrections) + retries_in_loop
    tasks: tuple[tuple[str, tuple[str, ...]], ...] = ()  # tasks: (id, write_scope)
