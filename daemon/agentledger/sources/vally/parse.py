"""vally ``results.jsonl`` / ``run-summary.jsonl`` lines → normalised trial and run facts.

Pydantic models at the edge (see ``shared/spec/vally-results.md``): a line is
validated straight from its bytes; only the fields the ledger keeps are
modelled, unknown keys are ignored (the raw line stays on disk, and the event
points at its bytes). Import cost (~60 ms for pydantic) is paid only by
commands that read vally sources, never by the close-task hook.
"""

from __future__ import annotations

import math

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...jsonnum import INT64_MAX, INT64_MIN, is_int64

_TRIAL_N = re.compile(r"::trial-(\d+)$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# Kept counters must fit SQLite's 64-bit integers, and JSON has no NaN/Infinity: a value
# outside either makes the line bad input (quarantined), checked in pydantic's Rust core.
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


class TokenUsage(_Model):
    inputTokens: Int64 | None = None
    outputTokens: Int64 | None = None
    totalTokens: Int64 | None = None
    cacheReadTokens: Int64 | None = None
    cacheWriteTokens: Int64 | None = None
    callCount: int | None = None


class Metrics(_Model):
    tokenUsage: TokenUsage | None = None
    toolCallCount: Int64 | None = None
    turnCount: Int64 | None = None
    wallTimeMs: Int64 | None = None
    errorCount: int | None = None


class ToolResultData(_Model):
    success: bool | None = None


class TrajectoryEvent(_Model):
    type: str = ""
    timestamp: str = ""
    data: Any = None


class Trajectory(_Model):
    events: list[TrajectoryEvent] = []
    metrics: Metrics | None = None


class GradeResult(_Model):
    model_config = ConfigDict(allow_inf_nan=False)  # merged with _Model's
    passed: bool | None = None
    score: float | None = None
    details: Any = None  # the graders: read leniently (``graders``), a strange shape never quarantines a trial


class Experiment(_Model):
    name: str = ""
    runId: str = ""
    variant: str = ""
    baseline: str = ""


class TrialResult(_Model):
    type: str | None = None
    itemId: str | None = None
    shardKey: str | None = None
    evalName: str = ""
    evalFilePath: str = ""
    variant: str = ""
    stimulus: str = ""
    model: str = ""
    trialIndex: Int64 | None = None
    status: str = ""
    durationMs: Int64 | None = None
    gradeResult: GradeResult | None = None
    trajectory: Trajectory | None = None
    experiment: Experiment | None = None
    runId: str | None = None


class AnyLine(TrialResult):
    """Every record kind in one model, so each line is parsed once. ``experiment``
    is a string on run summaries and an object on trials; summaries' fields
    that collide with trial fields keep the trial's type (read from ``Any``)."""

    experiment: Experiment | str | None = None  # type: ignore[assignment]
    passed: bool | None = None
    evals: list[Any] | None = None
    vallyVersion: str | None = None


class BadLine(ValueError):
    pass


def _reason(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "line"
    return f"{where}: {err.get('msg', 'invalid')}"


def parse(data: bytes) -> tuple[str, dict[str, Any] | None]:
    """(kind, facts) of one line: kind is ``trial``, ``run-summary``,
    ``experiment-run-summary`` or ``other:<type>`` (facts None). Raises BadLine."""
    try:
        r = AnyLine.model_validate_json(data)
    except ValidationError as exc:
        errs = exc.errors(include_url=False)
        if errs and errs[0].get("type") in ("json_invalid", "model_type", "model_attributes_type"):
            raise BadLine(f"not a JSON object: {_reason(exc)}") from None
        raise BadLine(f"record: {_reason(exc)}") from None
    t = r.type
    if t in (None, "", "trial-result"):  # untyped lines are legacy (pre-0.6) trial records
        return "trial", _trial(r)
    if t in ("run-summary", "experiment-run-summary"):
        return t, _summary(r)
    return f"other:{t}", None


def _trial(r: AnyLine) -> dict[str, Any]:
    index = r.trialIndex
    if index is None:
        m = _TRIAL_N.search(r.itemId or r.shardKey or "")
        index = int(m.group(1)) if m else 0
        if not is_int64(index):
            raise BadLine(f"record: trial index {index} (from the item id) is beyond a 64-bit integer")
    item = r.itemId or r.shardKey or "::".join(
        (r.evalFilePath, r.variant, r.model, r.stimulus, f"trial-{index}"))
    traj = r.trajectory
    metrics = traj.metrics if traj and traj.metrics else Metrics()
    tokens = metrics.tokenUsage or TokenUsage()
    tool_errors = None
    if traj is not None:
        tool_errors = sum(1 for e in traj.events if e.type == "tool_result"
                          and isinstance(e.data, dict) and e.data.get("success") is False)
    grade = r.gradeResult
    exp = r.experiment if isinstance(r.experiment, Experiment) else None
    facts = {
        "item_id": item,
        "run_id": r.runId or (exp.runId if exp else "") or "",
        "experiment": exp.name if exp else "",
        "eval_name": r.evalName,
        "stimulus": r.stimulus,
        "model": r.model,
        "variant": r.variant or (exp.variant if exp else "") or "main",
        "trial_index": index,
        "status": r.status,
        "duration_ms": r.durationMs,
        "grade_passed": grade.passed if grade else None,
        "grade_score": grade.score if grade else None,
        "passed": r.status == "success" and bool(grade and grade.passed),
        "input_tokens": tokens.inputTokens,
        "output_tokens": tokens.outputTokens,
        "cache_read_tokens": tokens.cacheReadTokens,
        "cache_write_tokens": tokens.cacheWriteTokens,
        "tool_calls": metrics.toolCallCount,
        "tool_errors": tool_errors,
        "turns": metrics.turnCount,
        "wall_time_ms": metrics.wallTimeMs,  # what vally's report.md calls the duration
        "total_tokens": tokens.totalTokens,
        "graders": graders(grade),
    }
    return facts


def graders(grade: GradeResult | None) -> list[list]:
    """[name, passed, score] of each top-level grader of a trial (report.md's "graders
    passed"); a detail that is not a grader object is left out."""
    out = []
    details = grade.details if grade is not None and isinstance(grade.details, list) else []
    for d in details:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            continue
        passed = d.get("passed") if isinstance(d.get("passed"), bool) else None
        out.append([d["name"], passed, _finite(d.get("score"))])
    return out


def _finite(v: object) -> float | None:
    """A JSON number as a finite float, else None (an integer too large for a float too)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def trajectory_facts(data: bytes, line_offset: int) -> list[list]:
    """Turn facts from a trial's trajectory (the opt-in third transcript kind):
    ``token_usage`` events are turns with tokens, ``tool_result`` events tool results."""
    from ..transcripts.parse import parse_go_time

    r = AnyLine.model_validate_json(data)
    if r.trajectory is None:
        return []
    out = []
    for k, e in enumerate(r.trajectory.events):
        if e.type not in ("token_usage", "tool_result") or not isinstance(e.data, dict):
            continue
        ts = parse_go_time(e.timestamp)
        if ts is None:
            continue
        d = e.data
        if e.type == "token_usage":
            nums = [d.get(key) for key in ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")]
            nums = [n if is_int64(n) and n >= 0 else 0 for n in nums]
            out.append([line_offset + k, ts, "vally", *nums, 1, 0, 0])
        else:
            out.append([line_offset + k, ts, "vally", 0, 0, 0, 0, 0, 1, int(d.get("success") is False)])
    return out


def _summary(r: AnyLine) -> dict[str, Any]:
    experiment = r.type == "experiment-run-summary"
    name = r.experiment if isinstance(r.experiment, str) else (r.experiment.name if r.experiment else "")
    return {
        "kind": "experiment" if experiment else "eval",
        "run_id": r.runId or "",
        "experiment": name or "",
        "variant": r.variant or "",
        # A plain eval's run is complete when its summary lists evals (spec §9).
        "complete": experiment or bool(r.evals),
        "passed": r.passed,
        "status": r.status or None,
        "vally_version": r.vallyVersion,
    }
