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


# what of a ``score.computed`` payload its sidecar shows: a bulk sync reads only these
# (``STORED_SQL``: a JSON array of them, taken from the stored payload by SQLite), about
# half of the payload's text (the integrity pairs are the rest)
RENDERED = ("iteration", "rubric_version", "scored", "value", "band", "breakdown", "marker", "linked_traces")
STORED_SQL = "json_extract(payload, " + ", ".join(f"'$.{k}'" for k in RENDERED) + ")"
_ROWS: dict[tuple, str] = {}  # a breakdown row's text by its stored values (rows repeat a lot)


def render_stored(job: tuple[str, str, int, str]) -> tuple[str, bytes]:
    """(path, event type, schema version, ``STORED_SQL`` of a stored ``score.computed``
    event) -> (path, its sidecar's bytes), as ``render_score_payload`` renders them: a
    bulk sync (a switch back to a rubric the ledger holds, a rebuild) renders in the
    worker processes. Rows are looked up by their stored values; a payload with a
    negative zero in it (``-0.0`` equals ``0.0`` as a key, and prints as ``-0``) takes
    the long way."""
    path, type_, version, fields = job
    p = upcast(type_, version, dict(zip(RENDERED, json.loads(fields))))
    if "-0.0" in fields:
        return path, render_score_payload(p)
    texts = []
    for r in p["breakdown"]:
        key = (r["signal"], r["label"], r["present"], r["sub_score"], r["detail"], r["nominal_weight"],
               r["effective_weight"], r["contribution"])
        text = _ROWS.get(key)
        if text is None:
            if len(_ROWS) >= sidecars.ROWS_KEPT:
                _ROWS.clear()
            text = _ROWS[key] = sidecars.row_text(_breakdown_rows({"breakdown": [r]})[0])
        texts.append(text)
    return path, sidecars.render_iteration_rows(
        p["iteration"], p["rubric_version"], p["scored"], decode_float(p["value"]), p["band"], texts,
        bool(p.get("marker") and p.get("linked_traces")))


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

    _INSERT = ("INSERT OR REPLACE INTO scores (source, iteration, rubric_version, scored, value, band,"
               " inputs_hash, sidecar, sidecar_sha256, seq, inputs_key) VALUES (?,?,?,?,?,?,?,?,?,?,?)")

    def _score_computed(self, ev: Event, p: dict[str, Any]) -> None:
        self.conn.execute(self._INSERT, self._row(ev, p))

    def scores_computed(self, events: list[Event]) -> None:
        """A run of ``score.computed`` events, in order: what ``_score_computed`` one by
        one leaves, in one statement."""
        self.conn.executemany(self._INSERT, [self._row(ev, ev.payload) for ev in events])

    def _row(self, ev: Event, p: dict[str, Any]) -> tuple:
        sha = ev.extra.get("sidecar_sha256") or sidecars.sha256(ev.extra.get("sidecar_bytes") or render_score_payload(p))
        self.sessions.mark(ev.source, p["iteration"], p["rubric_version"])  # type: ignore[arg-type]
        return (ev.source, p["iteration"], p["rubric_version"], int(p["scored"]), real(decode_float(p["value"])),
                p["band"], p["inputs_hash"], p["sidecar"], sha, ev.seq, p.get("inputs_key"))

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
