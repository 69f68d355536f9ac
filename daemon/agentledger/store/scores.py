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
from ..output import score_rows, sidecars
from .events import CURRENT, Event, canonical_json, upcast
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


# What of a ``score.computed`` payload its sidecar shows, as a bulk sync reads it
# (``STORED_SQL``, taken out of the stored payload by SQLite): the header's fields as a
# JSON array, then each breakdown row as its position, \x1f and its JSON text (as SQLite
# writes it: numbers as stored), joined by \x1e (JSON escapes every control character in
# a string); the positions put the rows in order (an aggregate's order is SQLite's to pick).
HEADER = ("iteration", "rubric_version", "scored", "value", "band", "marker", "linked_traces")
STORED_SQL = ("json_extract(payload, " + ", ".join(f"'$.{k}'" for k in HEADER) + "),"
              " (SELECT group_concat(key || char(31) || value, char(30)) FROM json_each(payload, '$.breakdown'))")
CURRENT_SCORE = CURRENT["score.computed"]


def stored_job(path: str, type_: str, version: int, header: str, rows: str | None) -> tuple | None:
    """What ``render_stored`` takes for one stored score (a row of ``STORED_SQL``); None
    for an older payload version, which is rendered from its whole payload, upcast
    (``render_stored`` takes (path, type, version, payload JSON) for it)."""
    return (path, header, rows) if version == CURRENT_SCORE else None


def render_stored(job: tuple) -> tuple[str, bytes]:
    """A ``stored_job`` -> (path, its sidecar's bytes), as ``render_score_payload``
    renders them: a bulk sync (a switch back to a rubric the ledger holds, a rebuild)
    renders in the worker processes. Each row is looked up by its stored JSON text
    (``score_rows.ROWS``: a row with -0.0 is another text than one with 0.0) and decoded
    only when new. A job of (path, bytes) (the ``score_sidecars`` row) is its own answer."""
    if len(job) == 2:
        return job
    if len(job) == 4:
        path, type_, version, payload = job
        return path, render_score_payload(upcast(type_, version, json.loads(payload)))
    path, header, rows = job
    p = dict(zip(HEADER, json.loads(header)))
    parts = [r.partition("\x1f") for r in rows.split("\x1e")] if rows else []
    if any(k != str(i) for i, (k, _, _) in enumerate(parts)):
        parts.sort(key=lambda part: int(part[0]))
    texts = []
    for _, _, row in parts:
        texts.append(score_rows.ROWS.get(row) or score_rows.remember_row(
            row, score_rows.row_text(_breakdown_rows({"breakdown": [json.loads(row)]})[0])))
    return path, sidecars.render_iteration_rows(
        p["iteration"], p["rubric_version"], p["scored"], decode_float(p["value"]), p["band"], texts,
        bool(p["marker"] and p["linked_traces"]))


# what of a ``score.computed`` payload this family reads (``ScoreFamily._row``, and
# ``sessions.mark`` through it): a scoring worker sends back only these as a dict
PROJECTED = ("iteration", "rubric_version", "inputs_hash", "inputs_key", "scored", "value", "band", "sidecar")


def signals_of(breakdown: list[dict[str, Any]]) -> str:
    """A score's ``signals`` column: its present, numeric sub-scores by signal, as JSON in
    breakdown order (numbers as the payload holds them; a non-finite one is a string there,
    and left out). The change-point detectors read it for every score of a pass; taking
    it out of each event's whole payload cost them ~25 us a score. Migration 0022 fills
    the same text in SQL for scores projected before it."""
    return canonical_json({r["signal"]: r["sub_score"] for r in breakdown
                           if r["present"] and type(r["sub_score"]) in (int, float)})


class ScoreFamily:
    tables = ("scores", "score_sidecars", "ledger_state")

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
               " inputs_hash, sidecar, sidecar_sha256, seq, inputs_key, signals) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")

    _SIDECAR = "INSERT OR REPLACE INTO score_sidecars (source, iteration, rubric_version, bytes) VALUES (?,?,?,?)"

    def _score_computed(self, ev: Event, p: dict[str, Any]) -> None:
        row, data = self._row(ev, p)
        self.conn.execute(self._INSERT, row)
        self.conn.execute(self._SIDECAR, (*row[:3], data))

    def scores_computed(self, events: list[Event]) -> None:
        """A run of ``score.computed`` events, in order: what ``_score_computed`` one by
        one leaves, in two statements."""
        rows = [self._row(ev, ev.payload) for ev in events]
        self.conn.executemany(self._INSERT, [r for r, _ in rows])
        self.conn.executemany(self._SIDECAR, [(*r[:3], data) for r, data in rows])

    def _row(self, ev: Event, p: dict[str, Any]) -> tuple[tuple, bytes]:
        """The ``scores`` row and the sidecar's bytes (``extra``: what a scoring worker
        computed beside the payload's ``PROJECTED`` fields, the sidecar's bytes and sha256
        and the ``signals`` column; else from the payload, as a rebuild renders it)."""
        data = ev.extra.get("sidecar_bytes") or render_score_payload(p)
        sha = ev.extra.get("sidecar_sha256") or sidecars.sha256(data)
        signals = ev.extra.get("signals")
        self.sessions.mark(ev.source, p["iteration"], p["rubric_version"])  # type: ignore[arg-type]
        return (ev.source, p["iteration"], p["rubric_version"], int(p["scored"]), real(decode_float(p["value"])),
                p["band"], p["inputs_hash"], p["sidecar"], sha, ev.seq, p.get("inputs_key"),
                signals if signals is not None else signals_of(p["breakdown"])), data

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
