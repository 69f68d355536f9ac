"""The annotated-trajectory format's vocabulary and document model: the fields a
front matter declares, outcome markers, the parsed document, and the fields derived
from its control flow and hypothesis log (never trusted from the declaration).
``parse`` reads text into these."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

PARSER_VERSION = 1
CANONICAL_PHASES = ("EXPLORE", "PLAN", "FILTER", "EXTRACT", "DELEGATE", "VERIFY", "ERROR", "RETURN", "STALL")
COMPUTED_FIELDS = ("hypothesesTested", "hypothesesRejected", "breakthroughIter", "itersOnRejectedHypotheses",
                   "itersExplore", "itersExtract", "itersVerify", "itersWasted", "implementationAttempts")
V3_FIELDS = ("delegationCount", "delegationItersTotal")
REQUIRED_FIELDS = ("taskId", "score", "iterations", "wallTimeMs", "answerType", "taskGroup", "answer",
                   "expected", "error", "patterns", "failureMode", "verdict")
KNOWN_FIELDS = REQUIRED_FIELDS + COMPUTED_FIELDS + V3_FIELDS
HYPOTHESIS_OUTCOMES = ("rejected", "accepted", "abandoned", "superseded")
# Outcome markers: canonical ones, then the ASCII/other stand-ins seen in real files
# (not recognised in v1 files, where a description may start with "v" or "x").
CANONICAL_MARKERS = {"✓": "success", "✗": "failure", "~": "partial", "→": "neutral"}
ASCII_MARKERS = {"+": "success", "v": "success", "x": "failure", "->": "neutral", "**": "unknown"}
STRIP = {"success": "✓", "failure": "✗", "partial": "~", "neutral": "→", "unknown": "?"}
_INT = re.compile(r"^\s*(~)?\s*(-?\d+)")


class BadAnnotation(ValueError):
    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line = line
        self.reason = reason


@dataclass
class Problem:
    line: int | None
    kind: str  # "format" | "disagreement" | "verdict"
    message: str


@dataclass
class FlowLine:
    ordinal: int
    line_no: int
    kind: str  # iter | child | ellipsis | marker | unparsed
    raw: str
    iter_from: int | None = None
    iter_to: int | None = None
    iter_approx: bool = False
    self_iter: bool = False
    delegation_id: str | None = None
    parent_ordinal: int | None = None  # for child lines
    phase_raw: str | None = None
    phase: str | None = None
    subphase: str | None = None
    tags: list[str] = field(default_factory=list)
    hyp_ids: list[str] = field(default_factory=list)
    deleg_ids: list[str] = field(default_factory=list)
    marker_raw: str | None = None
    outcome: str | None = None
    description: str = ""
    pseudo: bool = False

    def iterations(self) -> range:
        if self.iter_from is None:
            return range(0)
        lo, hi = sorted((self.iter_from, self.iter_to if self.iter_to is not None else self.iter_from))
        return range(lo, hi + 1)

    def phases(self) -> set[str]:
        """The coarse phases this line counts under (a compound EXPLORE+EXTRACT counts under both)."""
        return set(re.split(r"[+/]", self.phase)) - {""} if self.phase else set()


@dataclass
class Hypothesis:
    line_no: int
    hid: str
    text: str
    iters_raw: str
    iters: list[int] | None
    outcome: str
    outcome_note: str
    superseded_by: str | None
    evidence: str


@dataclass
class Section:
    ordinal: int
    line_no: int
    heading: str
    body: str


@dataclass
class Annotation:
    format_version: str  # v1 | v2 | v3 | off-format
    task_id: str | None
    title_id: str | None
    frontmatter: dict[str, Any]
    frontmatter_raw: str | None
    sections: list[Section]
    flow: list[FlowLine]
    flow_notes: str
    hypotheses: list[Hypothesis]
    hypothesis_arc: str | None
    delegations: list[dict[str, Any]]
    resources: list[tuple[str, str, str]]  # (resource, column, raw value)
    declared: dict[str, Any]
    derived: dict[str, Any]
    problems: list[Problem]
    score: float | None
    score_norm: float | None
    field_lines: dict[str, int]

    @property
    def control_flow_lines(self) -> int:
        return len(self.flow)

    @property
    def control_flow_lines_parsed(self) -> int:
        return sum(1 for ln in self.flow if ln.kind != "unparsed")

    def outcome_strip(self) -> str:
        """One character per parent iteration line: ✓ ✗ ~ → ? (· when unmarked)."""
        return "".join(STRIP.get(ln.outcome or "", "·") for ln in self.flow if ln.kind == "iter" and not ln.pseudo)

    def agreement(self) -> dict[str, bool | None]:
        """Per computed field: declared == derived (None when either side is missing)."""
        out: dict[str, bool | None] = {}
        for name in COMPUTED_FIELDS + V3_FIELDS:
            if name not in self.declared and name not in self.derived:
                continue
            out[name] = agrees(self.declared.get(name), self.derived.get(name), name in self.declared)
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["control_flow_lines"] = self.control_flow_lines
        d["control_flow_lines_parsed"] = self.control_flow_lines_parsed
        d["outcome_strip"] = self.outcome_strip()
        d["agreement"] = self.agreement()
        d["parser_version"] = PARSER_VERSION
        return d


def agrees(declared: Any, derived: Any, has_declared: bool) -> bool | None:
    """None when nothing was declared; null agrees only with null; ``~10`` agrees with 10."""
    if not has_declared:
        return None
    if declared is None or derived is None:
        return declared is None and derived is None
    d = as_number(declared)
    return d is not None and d[0] == derived


def as_number(value: Any) -> tuple[float, bool] | None:
    """(value, approximate) of an int/float or a string such as ``~10``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return (value, False) if math.isfinite(value) else None
    if isinstance(value, str):
        m = _INT.match(value)
        if m and m.end() == len(value.rstrip()):
            return int(m.group(2)), bool(m.group(1))
    return None


def derive(flow: list[FlowLine], hyps: list[Hypothesis], delegations: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The computed fields by the definitions of the spec's §7 (see the README for the choices)."""
    parents = [ln for ln in flow if ln.kind == "iter" and not ln.pseudo]

    def iters_with(pred) -> int:
        its: set[int] = set()
        for ln in parents:
            if pred(ln):
                its.update(ln.iterations())
        return len(its)

    accepted = [h for h in hyps if h.outcome == "accepted"]
    accepted_ids = {h.hid for h in accepted}
    breakthrough = None
    if accepted:
        hits = [min(ln.iterations()) for ln in parents
                if ln.outcome == "success" and accepted_ids & set(ln.hyp_ids) and ln.iter_from is not None]
        if hits:
            breakthrough = min(hits)
        else:
            for h in accepted:
                if h.iters:
                    breakthrough = min(h.iters)
                    break
    rejected_iters: set[int] = set()
    for h in hyps:
        if h.outcome == "rejected" and h.iters:
            rejected_iters.update(h.iters)
    out = {
        "hypothesesTested": len({h.hid for h in hyps if h.hid}),
        "hypothesesRejected": sum(1 for h in hyps if h.outcome == "rejected"),
        "breakthroughIter": breakthrough,
        "itersOnRejectedHypotheses": len(rejected_iters),
        "itersExplore": iters_with(lambda ln: "EXPLORE" in ln.phases()),
        "itersExtract": iters_with(lambda ln: "EXTRACT" in ln.phases()),
        "itersVerify": iters_with(lambda ln: "VERIFY" in ln.phases()),
        "itersWasted": iters_with(lambda ln: bool(ln.phases() & {"STALL", "ERROR"})
                                  or ("VERIFY" in ln.phases() and ln.subphase == "reconfirm")),
        "implementationAttempts": sum(1 for ln in parents if "EXTRACT" in ln.phases() and ln.subphase == "implement"),
    }
    if delegations is not None:
        out["delegationCount"] = len(delegations)
        out["delegationItersTotal"] = sum(d["iters_used_n"] or 0 for d in delegations)
    return out


def verdict_findings(fm: dict[str, Any], score_norm: float | None) -> list[str]:
    """The spec's §8 consistency checks: warnings, never errors."""
    out = []
    verdict = fm.get("verdict")
    s = score_norm
    if isinstance(verdict, str) and s is not None:
        if verdict == "perfect" and s != 1:
            out.append(f"verdict perfect but score is {fm.get('score')}")
        if verdict in ("wrong-answer", "timeout", "error") and s != 0:
            out.append(f"verdict {verdict} but score is {fm.get('score')} (expected 0)")
        if verdict == "partial-credit" and not 0 < s < 1:
            out.append(f"verdict partial-credit but score is {fm.get('score')} (expected between 0 and 1)")
    if verdict == "timeout":
        err, answer = fm.get("error"), fm.get("answer")
        if not (isinstance(err, str) and re.search(r"max.{0,3}iter", err, re.I)) and answer not in (None, ""):
            out.append("verdict timeout but the error does not mention max iterations and an answer was returned")
    if verdict == "error" and not fm.get("error"):
        out.append("verdict error but error is empty")
    if "failureMode" in fm and isinstance(verdict, str):
        success = verdict in ("perfect", "train-perfect")
        if (fm.get("failureMode") is None) != success:
            out.append(f"failureMode {'is null' if fm.get('failureMode') is None else 'is set'} "
                       f"but the verdict is {verdict}")
    if "verdict" not in fm:
        out.append("no verdict")
    return out
