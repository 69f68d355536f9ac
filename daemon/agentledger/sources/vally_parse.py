"""vally ``results.jsonl`` / ``run-summary.jsonl`` lines → normalised trial and run facts.

Pydantic models at the edge (see ``shared/spec/vally-results.md``): a line is
validated straight from its bytes; only the fields the ledger keeps are
modelled, unknown keys are ignored (the raw line stays on disk, and the event
points at its bytes). Import cost (~60 ms for pydantic) is paid only by
commands that read vally sources, never by the close-task hook.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

_TRIAL_N = re.compile(r"::trial-(\d+)$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TokenUsage(_Model):
    inputTokens: int | None = None
    outputTokens: int | None = None
    totalTokens: int | None = None
    cacheReadTokens: int | None = None
    cacheWriteTokens: int | None = None
    callCount: int | None = None


class Metrics(_Model):
    tokenUsage: TokenUsage | None = None
    toolCallCount: int | None = None
    turnCount: int | None = None
    wallTimeMs: int | None = None
    errorCount: int | None = None


class ToolResultData(_Model):
    success: bool | None = None


class TrajectoryEvent(_Model):
    type: str = ""
    data: Any = None


class Trajectory(_Model):
    events: list[TrajectoryEvent] = []
    metrics: Metrics | None = None


class GradeResult(_Model):
    passed: bool | None = None
    score: float | None = None


class Experiment(_Model):
    name: str = ""
    runId: str = ""
    variant: str = ""
    baseline: str = ""


class Line(_Model):
    """What every line is asked first: its type."""

    type: str | None = None


class TrialResult(_Model):
    type: str | None = None
    itemId: str | None = None
    shardKey: str | None = None
    evalName: str = ""
    evalFilePath: str = ""
    variant: str = ""
    stimulus: str = ""
    model: str = ""
    trialIndex: int | None = None
    status: str = ""
    durationMs: int | None = None
    gradeResult: GradeResult | None = None
    trajectory: Trajectory | None = None
    experiment: Experiment | None = None
    runId: str | None = None


class RunSummary(_Model):
    type: str
    runId: str | None = None
    experiment: str | None = None
    variant: str | None = None
    passed: bool | None = None
    status: str | None = None
    evals: list[dict[str, Any]] | None = None
    vallyVersion: str | None = None


class BadLine(ValueError):
    pass


def _reason(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "line"
    return f"{where}: {err.get('msg', 'invalid')}"


def classify(data: bytes) -> str:
    """``trial`` | ``run-summary`` | ``experiment-run-summary`` | ``other:<type>``; raises BadLine."""
    try:
        head = Line.model_validate_json(data)
    except ValidationError as exc:
        raise BadLine(f"not a JSON object: {_reason(exc)}") from None
    t = head.type
    if t in (None, "", "trial-result"):
        return "trial"  # untyped lines are legacy (pre-0.6) trial records
    if t in ("run-summary", "experiment-run-summary"):
        return t
    return f"other:{t}"


def trial_facts(data: bytes) -> dict[str, Any]:
    try:
        r = TrialResult.model_validate_json(data)
    except ValidationError as exc:
        raise BadLine(f"trial-result: {_reason(exc)}") from None
    index = r.trialIndex
    if index is None:
        m = _TRIAL_N.search(r.itemId or r.shardKey or "")
        index = int(m.group(1)) if m else 0
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
    exp = r.experiment
    return {
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
    }


def summary_facts(data: bytes) -> dict[str, Any]:
    try:
        s = RunSummary.model_validate_json(data)
    except ValidationError as exc:
        raise BadLine(f"run summary: {_reason(exc)}") from None
    experiment = s.type == "experiment-run-summary"
    return {
        "kind": "experiment" if experiment else "eval",
        "run_id": s.runId or "",
        "experiment": s.experiment or "",
        "variant": s.variant or "",
        # A plain eval's run is complete when its summary lists evals (spec §9).
        "complete": experiment or bool(s.evals),
        "passed": s.passed,
        "status": s.status,
        "vally_version": s.vallyVersion,
    }
