"""Parse iteration-log files (``iter-N.yaml``, ``historical.yaml``) into Records.

Pure functions of text. Schema dispatch, field types and the lenient
tri-state flags follow the reference's yaml.v3 decoding (spec §3), so a file
the Go scorer accepts is accepted here with the same values, and a file it
rejects is rejected (and quarantined by the caller) with a similar reason.
"""

from __future__ import annotations

from yaml.nodes import Node

from ...reference.yamlv3.decode import Decoder, YamlError, budget_for, load_document
from ...model import Agent, Impl, LinkedTrace, Record, Review, SelfAssessment, SessionTokens, TestByKind, Verifier

_BOOL_FLAGS = (
    "read_loop_state",
    "committed_after_tests",
    "ran_cli_command",
    "exercised_new_scenario",
    "tests_positive_and_negative",
    "tests_used_sandbox",
    "linked_traces_to_outcomes",
    "stayed_under_10_files",
    "tdd_refresh_performed",
)
_TRI_FLAGS = (
    "one_item_only",
    "aligned_with_canonical_tasks",
    "no_destructive_commands",
    "scoped_tests_to_write_scope",
)
_STR_FLAGS = ("persisted_via_workflow_commands", "cli_produced_actionable_feedback")
_COMMON_INT = ("iteration", "files_changed", "lines_added", "lines_removed")
_COMMON_STR = ("date", "wave", "task_id", "commit", "first_commit")


def _self_assessment(d: Decoder, node: Node | None) -> SelfAssessment:
    m = d.mapping(node, "scoring.rawSelfAssessment")
    if not m:
        return SelfAssessment()
    kw: dict[str, object] = {}
    for k in _BOOL_FLAGS:
        if k in m:
            kw[k] = d.bool_(m[k])
    for k in _TRI_FLAGS:
        if k in m:
            kw[k] = d.tri(m[k])
    for k in _STR_FLAGS:
        if k in m:
            kw[k] = d.string(m[k])
    return SelfAssessment(**kw)  # type: ignore[arg-type]


def _common(d: Decoder, m: dict[str, Node]) -> dict[str, object]:
    kw: dict[str, object] = {}
    for k in _COMMON_INT:
        kw[k] = d.int_(m.get(k))
    for k in _COMMON_STR:
        kw[k] = d.string(m.get(k))
    return kw


def _v1(d: Decoder, m: dict[str, Node]) -> Record:
    kw = _common(d, m)
    impl = Impl(
        summary=d.string(m.get("summary")),
        scope_note=d.string(m.get("scope_note")),
        retries=d.int_(m.get("retries")),
        focused_tests_added=d.int_(m.get("tests_added")),
        tests_total_pass=d.tri(m.get("tests_total_pass")),
        self_assessment=_self_assessment(d, m.get("self_assessment")),
    )
    return Record(schema_version=1, impl=impl, **kw)  # type: ignore[arg-type]


def _v2(d: Decoder, m: dict[str, Node]) -> Record:
    kw = _common(d, m)
    kw["checkpoint_at"] = d.string(m.get("checkpoint_at"))

    agent_m = d.mapping(m.get("agent"), "scoring.rawAgent") or {}
    agent = Agent(
        session_id=d.string(agent_m.get("session_id")),
        harness=d.string(agent_m.get("harness")),
        model=d.string(agent_m.get("model")),
    )

    tokens = None
    if "session_tokens" in m:
        tok_m = d.mapping(m["session_tokens"], "scoring.rawSessionTokens")
        if tok_m is not None:  # present, even `{}`, means native telemetry exists
            tokens = SessionTokens(
                input_tokens=d.int_(tok_m.get("input_tokens")),
                output_tokens=d.int_(tok_m.get("output_tokens")),
                cache_read_tokens=d.int_(tok_m.get("cache_read_tokens")),
                cache_creation_tokens=d.int_(tok_m.get("cache_creation_tokens")),
                cache_hit_rate=d.float_(tok_m.get("cache_hit_rate")),
            )

    impl_m = d.mapping(m.get("impl"), "scoring.rawImpl") or {}
    impl = Impl(
        summary=d.string(impl_m.get("summary")),
        scope_note=d.string(impl_m.get("scope_note")),
        retries=d.int_(impl_m.get("retries")),
        focused_tests_added=d.int_(impl_m.get("focused_tests_added")),
        focused_tests_pass=d.tri(impl_m.get("focused_tests_pass")),
        self_assessment=_self_assessment(d, impl_m.get("self_assessment")),
    )

    verifiers = []
    for vnode in d.sequence(m.get("verifiers"), "[]scoring.rawVerifier"):
        vm = d.mapping(vnode, "scoring.rawVerifier")
        if vm is None:
            continue
        by_kind = []
        for item in d.sequence(vm.get("tests_added_by_kind"), "[]scoring.TestByKind"):
            im = d.mapping(item, "scoring.TestByKind") or {}
            by_kind.append(TestByKind(name=d.string(im.get("name")), kind=d.string(im.get("kind"))))
        traces = []
        for item in d.sequence(vm.get("linked_traces"), "[]scoring.LinkedTrace"):
            im = d.mapping(item, "scoring.LinkedTrace") or {}
            traces.append(LinkedTrace(trace_ref=d.string(im.get("trace_ref")),
                                      outcome_ref=d.string(im.get("outcome_ref"))))
        verifiers.append(
            Verifier(
                type=d.string(vm.get("type")),
                status=d.string(vm.get("status")),
                gate_passed=d.bool_(vm.get("gate_passed")),
                tests_added=d.int_(vm.get("tests_added")),
                tests_total_pass=d.tri(vm.get("tests_total_pass")),
                retries=d.int_(vm.get("retries")),
                result_artifact=d.string(vm.get("result_artifact")),
                self_assessment=_self_assessment(d, vm.get("self_assessment")),
                tests_added_by_kind=tuple(by_kind),
                linked_traces=tuple(traces),
            )
        )

    rev_m = d.mapping(m.get("review"), "scoring.rawReview") or {}
    review = Review(
        phase_1_decision=d.string(rev_m.get("phase_1_decision")),
        phase_2_decision=d.string(rev_m.get("phase_2_decision")),
        overall_decision=d.string(rev_m.get("overall_decision")),
        failed_gates=tuple(d.str_list(rev_m.get("failed_gates"))),
        decision_artifact=d.string(rev_m.get("decision_artifact")),
    )
    return Record(schema_version=2, agent=agent, session_tokens=tokens, impl=impl,
                  verifiers=tuple(verifiers), review=review, **kw)  # type: ignore[arg-type]


def parse_record(text: str) -> Record:
    """One ``iter-N.yaml`` document; raises ``YamlError`` with the reason."""
    root = load_document(text)
    probe = Decoder(budget_for(text))
    pm = probe.mapping(root, "scoring.schemaProbe") or {}
    version = probe.int_(pm.get("schema_version"))
    probe.raise_if_errors("probe iteration-log schema: ")
    if version not in (1, 2):
        raise YamlError(f"unsupported iteration-log schema_version {version}",
                        _line(pm.get("schema_version")))
    d = Decoder(budget_for(text))
    m = d.mapping(root, "scoring.rawV1" if version == 1 else "scoring.rawV2") or {}
    record = _v1(d, m) if version == 1 else _v2(d, m)
    d.raise_if_errors(f"parse v{version} iteration entry: ")
    return record


def parse_historical(text: str, *, entry_at_a_time_from: int | None = None) -> list[Record]:
    """``historical.yaml``: every entry is read with the v1 shape, as schema 1. A large
    archive of the plain shape is read an entry at a time (``archive.py``: the same records
    and errors, in bounded memory); ``entry_at_a_time_from``: from how many characters
    (tests compare both paths on small files)."""
    from . import archive

    if len(text) >= (archive.ENTRY_AT_A_TIME_FROM if entry_at_a_time_from is None else entry_at_a_time_from):
        d = Decoder(budget_for(text))

        def entry(d: Decoder, item: Node) -> Record | None:
            im = d.mapping(item, "scoring.rawV1")
            return _v1(d, im) if im is not None else None

        try:
            records = archive.entries(text, d, entry)
        except archive.NotPlain:
            pass
        else:
            d.raise_if_errors("parse historical.yaml: ")
            return records
    root = load_document(text)
    d = Decoder(budget_for(text))
    m = d.mapping(root, "scoring.historicalFile") or {}
    records = []
    for item in d.sequence(m.get("iterations"), "[]scoring.rawV1"):
        im = d.mapping(item, "scoring.rawV1")
        if im is not None:
            records.append(_v1(d, im))
    d.raise_if_errors("parse historical.yaml: ")
    return records


def _line(node: Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None
