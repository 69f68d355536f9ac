"""The score family: ``score.computed`` events → ``scores`` (one row per iteration and
rubric), and the ledger's rubric state (``ledger_state``: the active and configured
rubric, a backfill under way and the last one). A new score marks its session for
recompute under its rubric."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ..jsonnum import decode_float
from ..output import sidecars
from .events import Event, canonical_json, upcast
from .sessions import SessionFamily, real


def _breakdown_rows(payload: dict[str, Any]) -> list[sidecars.BreakdownRow]:
    return [
        sidecars.BreakdownRow(
            signal=r["signal"], label=r["label"], present=r["present"],
            sub_score=decode_float(r["sub_score"]), detail=r["detail"],
            nominal_weight=decode_float(r["nominal_weight"]),
            effective_weight=decode_float(r["effective_weight"]),
            contribution=decode_float(r["contribution"]),
        )
        for r in payload["breakdown"]
    ]


def render_score_payload(payload: dict[str, Any]) -> bytes:
    """The exact sidecar bytes a ``score.computed`` payload stands for."""
    return sidecars.render_iteration(
        payload["iteration"], payload["rubric_version"], payload["scored"],
        decode_float(payload["value"]), payload["band"], _breakdown_rows(payload),
        linked_traces_marker=bool(payload.get("marker") and payload.get("linked_traces")),
    )


def render_stored(job: tuple[str, str, int, str]) -> tuple[str, bytes]:
    """(path, event type, schema version, payload JSON) of a stored ``score.computed``
    event -> (path, its sidecar's bytes): a bulk sync (a switch back to a rubric the
    ledger holds, a rebuild) decodes and renders in the worker processes, one job each."""
    path, type_, version, payload = job
    return path, render_score_payload(upcast(type_, version, json.loads(payload)))


class ScoreFamily:
    tables = ("scores", "ledger_state")

    def __init__(self, conn: sqlite3.Connection, sessions: SessionFamily) -> None:
        self.conn = conn
        self.sessions = sessions

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return {"score.computed": self._score_computed, "rubric.activated": self._rubric_activated,
                "rubric.configured": self._rubric_configured, "backfill.started": self._backfill_started,
                "backfill.completed": self._backfill_completed}

    def flush(self) -> None:
        pass

    def _score_computed(self, ev: Event, p: dict[str, Any]) -> None:
        sha = ev.extra.get("sidecar_sha256") or sidecars.sha256(ev.extra.get("sidecar_bytes") or render_score_payload(p))
        value = decode_float(p["value"])
        self.conn.execute(
            "INSERT OR REPLACE INTO scores (source, iteration, rubric_version, scored, value, band,"
            " inputs_hash, sidecar, sidecar_sha256, seq, inputs_key) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (ev.source, p["iteration"], p["rubric_version"], int(p["scored"]), real(value), p["band"],
             p["inputs_hash"], p["sidecar"], sha, ev.seq, p.get("inputs_key")),
        )
        self.sessions.mark(ev.source, p["iteration"], p["rubric_version"])  # type: ignore[arg-type]

    def _rubric_activated(self, ev: Event, p: dict[str, Any]) -> None:
        self._state("active_rubric", p["version"])
        self._state("active_rubric_seq", str(ev.seq))
        if "configured" in p:  # activations before the rule of rubrics.target did not say
            self._state("configured_rubric", p["configured"])

    def _rubric_configured(self, ev: Event, p: dict[str, Any]) -> None:
        self._state("configured_rubric", p["configured"])

    def _backfill_started(self, ev: Event, p: dict[str, Any]) -> None:
        self._state("backfill", canonical_json({**p, "started_seq": ev.seq}))

    def _backfill_completed(self, ev: Event, p: dict[str, Any]) -> None:
        self.conn.execute("DELETE FROM ledger_state WHERE key = 'backfill'")
        self._state("last_backfill", canonical_json({**p, "completed_seq": ev.seq}))

    def _state(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO ledger_state (key, value) VALUES (?, ?)", (key, value))
