"""Projections: tables folded from events, in the same transaction as the append.

This module holds the dispatcher (``Projector``), the iteration-log, score, rubric
and transcript handlers, and ``rebuild``; ``trials``, ``sessions`` and
``trajectories`` hold the other event families' handlers.

``Projector.apply`` is the only code that writes projection tables, for live
appends and for ``rebuild`` alike, so a replay of the log reproduces them
exactly. Session aggregates are recomputed once per transaction for the
sessions an event touched (``flush``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from ..model import decode_float
from ..output import sidecars
from .events import Event, canonical_json
from .sessions import SessionProjection, real, session_document, session_summary
from .trajectories import ANNOTATION_TABLES, TrajectoryProjection
from .trials import PreparedTrials, TrialProjection, trial_row

__all__ = ["PROJECTION_TABLES", "PreparedTrials", "Projector", "Touched", "rebuild", "render_score_payload",
           "session_document", "session_summary", "trial_row"]

PROJECTION_TABLES = (
    "record_files", "iterations", "hook_outcomes", "labels", "artifacts",
    "scores", "sessions", "quarantine", "ledger_state", "runs", "trials", "transcript_facts",
) + ANNOTATION_TABLES


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


# quarantine kinds of tailed files, whose records are about one line each: a file of
# any other kind (read whole) has at most one open problem, its newest
LINE_KINDS = ("vally", "transcript")


@dataclass
class Touched:
    """What a batch of events changed, for choosing which iterations to rescore."""

    iterations: set[tuple[str, int]] = field(default_factory=set)  # (source, iteration)
    artifacts: set[tuple[str, str]] = field(default_factory=set)  # (source, repo path)
    transcript_times: dict[str, list[int]] = field(default_factory=dict)  # directory -> ts_ns

    def merge(self, other: Touched) -> None:
        self.iterations |= other.iterations
        self.artifacts |= other.artifacts
        for k, v in other.transcript_times.items():
            self.transcript_times.setdefault(k, []).extend(v)


class Projector(TrialProjection, SessionProjection, TrajectoryProjection):
    """Folds events into the projection tables; handlers are ``_<event type>`` (the
    vally, session and annotation ones in their own modules)."""

    def __init__(self, conn: sqlite3.Connection, *, queue: bool = True):
        """``queue``: record what changed in ``pending`` for the next scoring pass
        (off for ``rebuild``, which reproduces scores rather than asking for them)."""
        self.conn = conn
        self.queue = queue
        self.dirty_sessions: set[tuple[str, str, str]] = set()
        self.run_deltas: dict[tuple[str, str], list[int]] = {}  # (source, run_dir) -> [trials, passed, errors, seq]
        self.touched = Touched()
        self._queued = Touched()
        self._runs_known: dict[tuple[str, str], tuple] = {}  # runs already upserted in this transaction
        # Trial rows are written once per flush; _trial_state is each trial's
        # (passed, error) as of the events applied so far (None: not stored).
        self._trial_rows: dict[tuple[str, str, str], tuple] = {}
        self._trial_state: dict[tuple[str, str, str], tuple[int, int] | None] = {}
        self.touched_sessions: set[tuple[str, str, str]] = set()
        # (bytes, sha256) of each session sidecar rendered by _recompute_sessions: the writer reuses both
        self.session_bytes: dict[tuple[str, str, str], tuple[bytes, str]] = {}

    @property
    def queued(self) -> Touched:
        """What the last ``flush`` queued for scoring."""
        return self._queued

    # -- dispatch -------------------------------------------------------------
    def apply(self, ev: Event) -> None:
        handler = getattr(self, "_" + ev.type.replace(".", "_"), None)
        if handler is None:  # an event type this version does not project
            return
        handler(ev, ev.payload)

    def flush(self) -> set[tuple[str, str, str]]:
        """Queue what changed for scoring, recompute touched sessions; returns the
        (source, session, rubric) keys changed."""
        self._queue_pending()
        self._flush_trials()
        for (source, run_dir), (n, passed, errors, seq) in sorted(self.run_deltas.items()):
            self.conn.execute(
                "UPDATE runs SET trials = trials + ?, passed = passed + ?, errors = errors + ?,"
                " seq = max(seq, ?) WHERE source = ? AND run_dir = ?", (n, passed, errors, seq, source, run_dir))
        self.run_deltas.clear()
        changed = set()
        groups: dict[tuple[str, str], list[str]] = {}
        for source, session_id, version in sorted(self.dirty_sessions):
            groups.setdefault((source, version), []).append(session_id)
        for (source, version), ids in groups.items():
            changed |= self._recompute_sessions(source, version, ids)
        self.dirty_sessions.clear()
        self.touched_sessions |= changed
        return changed

    def _queue_pending(self) -> None:
        t = self.touched
        rows = [(s, "iteration", str(it), None, None) for s, it in sorted(t.iterations)]
        rows += [(s, "artifact", p, None, None) for s, p in sorted(t.artifacts)]
        rows += [(d, "transcript", d, min(ts), max(ts)) for d, ts in sorted(t.transcript_times.items()) if ts]
        if rows and self.queue:
            self.conn.executemany("INSERT INTO pending (source, kind, key, lo, hi) VALUES (?,?,?,?,?)", rows)
        self._queued = Touched()
        self._queued.merge(t)  # what was queued stays readable (the ledger's in-memory view)
        self.touched = Touched()

    # -- helpers ----------------------------------------------------------------
    def _resolve_quarantine(self, source: str, path: str, seq: int) -> None:
        self.conn.execute(
            "UPDATE quarantine SET resolved_seq = ? WHERE source = ? AND path = ? AND resolved_seq IS NULL",
            (seq, source, path),
        )

    def _iterations_of_file(self, source: str, file: str) -> set[int]:
        return {r[0] for r in self.conn.execute(
            "SELECT iteration FROM record_files WHERE source = ? AND file = ?", (source, file))}

    def _refresh_iteration(self, source: str, iteration: int) -> None:
        """Re-derive the effective record of one iteration from record_files."""
        self.touched.iterations.add((source, iteration))
        self._mark_sessions_of(source, iteration)
        self.conn.execute("DELETE FROM iterations WHERE source = ? AND iteration = ?", (source, iteration))
        self.conn.execute(
            "INSERT INTO iterations (source, iteration, file, ordinal, kind, schema_version, date, task_id,"
            " commit_ref, session_id, content_hash, seq)"
            " SELECT source, iteration, file, ordinal, kind, json_extract(record, '$.schema_version'),"
            " json_extract(record, '$.date'), json_extract(record, '$.task_id'),"
            " json_extract(record, '$.commit'), json_extract(record, '$.agent.session_id'),"
            " content_hash, seq FROM record_files WHERE source = ? AND iteration = ?"
            " ORDER BY kind = 'dedicated' DESC, CASE WHEN kind = 'dedicated' THEN file END DESC,"
            " ordinal DESC LIMIT 1",
            (source, iteration),
        )
        self._mark_sessions_of(source, iteration)

    def _replace_records(self, ev: Event, file: str, kind: str, path: str | None, count: int,
                         iterations: list[int]) -> None:
        """Replace the records ``file`` carries with those at ``path`` of the event's
        stored payload (cut out by SQLite: no re-serialisation)."""
        before = self._iterations_of_file(ev.source, file)
        self.conn.execute("DELETE FROM record_files WHERE source = ? AND file = ?", (ev.source, file))
        if path is not None:
            self.conn.executemany(
                "INSERT INTO record_files (source, file, ordinal, iteration, kind, record, content_hash, seq)"
                " SELECT ?, ?, ?, ?, ?, json_extract(payload, ?), ?, ? FROM events WHERE seq = ?",
                [(ev.source, file, i, iterations[i], kind, path.format(i=i), ev.content_hash, ev.seq, ev.seq)
                 for i in range(count)],
            )
        for iteration in sorted(before | set(iterations)):
            self._refresh_iteration(ev.source, iteration)

    # -- handlers -----------------------------------------------------------------
    def _iteration_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        self._replace_records(ev, p["file"], "dedicated", "$.record", 1, [p["record"]["iteration"]])
        self._resolve_quarantine(ev.source, p["file"], ev.seq)  # type: ignore[arg-type]

    def _historical_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        recs = p["records"]
        self._replace_records(ev, p["file"], "historical", "$.records[{i}]", len(recs),
                              [r["iteration"] for r in recs])
        self._resolve_quarantine(ev.source, p["file"], ev.seq)  # type: ignore[arg-type]

    def _side_file(self, table: str, count_key: str, ev: Event, p: dict[str, Any]) -> None:
        """hook_outcomes / labels: one row per iteration, the parsed outcome or its error."""
        o = p["outcome"]
        self.touched.iterations.add((ev.source, p["iteration"]))
        self.conn.execute(
            f"INSERT OR REPLACE INTO {table} (source, iteration, file, outcome, {count_key}, error,"
            " content_hash, seq) VALUES (?,?,?,?,?,?,?,?)",
            (ev.source, p["iteration"], p["file"], canonical_json(o), len(o[count_key]), o["error"],
             ev.content_hash, ev.seq),
        )
        self._resolve_quarantine(ev.source, p["file"], ev.seq)  # type: ignore[arg-type]

    def _hook_outcomes_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        self._side_file("hook_outcomes", "records", ev, p)

    def _labels_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        self._side_file("labels", "labels", ev, p)

    def _artifact_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        a = p["artifact"]
        self.touched.artifacts.add((ev.source, p["path"]))
        self.conn.execute(
            "INSERT OR REPLACE INTO artifacts (source, path, kind, available, artifact, content_hash, seq)"
            " VALUES (?,?,?,?,?,?,?)",
            (ev.source, p["path"], a["kind"], int(a["available"]), canonical_json(a),
             ev.content_hash, ev.seq),
        )
        self._resolve_quarantine(ev.source, p["path"], ev.seq)  # type: ignore[arg-type]

    def _file_removed(self, ev: Event, p: dict[str, Any]) -> None:
        path, kind = p["file"], p["kind"]
        if kind == "annotation":
            self._forget_annotation(ev.source, path)
        elif kind in ("record", "historical"):
            self._replace_records(ev, path, "dedicated", None, 0, [])
        elif kind == "hook_outcomes":
            self._touch_side(ev.source, "hook_outcomes", path)
            self.conn.execute("DELETE FROM hook_outcomes WHERE source = ? AND file = ?", (ev.source, path))
        elif kind == "labels":
            self._touch_side(ev.source, "labels", path)
            self.conn.execute("DELETE FROM labels WHERE source = ? AND file = ?", (ev.source, path))
        else:
            self.touched.artifacts.add((ev.source, path))
            self.conn.execute("DELETE FROM artifacts WHERE source = ? AND path = ?", (ev.source, path))
        self._resolve_quarantine(ev.source, path, ev.seq)  # type: ignore[arg-type]

    def _touch_side(self, source: str, table: str, file: str) -> None:
        for (it,) in self.conn.execute(f"SELECT iteration FROM {table} WHERE source = ? AND file = ?", (source, file)):
            self.touched.iterations.add((source, it))

    def _source_quarantined(self, ev: Event, p: dict[str, Any]) -> None:
        if p["kind"] not in LINE_KINDS:  # a file has one open problem: its newest
            self._resolve_quarantine(ev.source, p["path"], ev.seq)
        self.conn.execute(
            "INSERT INTO quarantine (source, path, kind, line, col, byte_offset, reason, content_hash, seq)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (ev.source, p["path"], p["kind"], p.get("line"), p.get("column"), p.get("byte_offset"),
             p["reason"], p.get("content_hash"), ev.seq),
        )
        if p["kind"] in ("verifier_result", "review_decision", "tasks"):
            self.touched.artifacts.add((ev.source, p["path"]))
            # The reference reads a broken artifact as "not available".
            self.conn.execute("DELETE FROM artifacts WHERE source = ? AND path = ?", (ev.source, p["path"]))

    def _rubric_activated(self, ev: Event, p: dict[str, Any]) -> None:
        self._state("active_rubric", p["version"])
        self._state("active_rubric_seq", str(ev.seq))
        if "configured" in p:  # activations before the rule of Ledger.rubric_target did not say
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

    def _score_computed(self, ev: Event, p: dict[str, Any]) -> None:
        sha = ev.extra.get("sidecar_sha256") or sidecars.sha256(ev.extra.get("sidecar_bytes") or render_score_payload(p))
        value = decode_float(p["value"])
        self.conn.execute(
            "INSERT OR REPLACE INTO scores (source, iteration, rubric_version, scored, value, band,"
            " inputs_hash, sidecar, sidecar_sha256, seq, inputs_key) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (ev.source, p["iteration"], p["rubric_version"], int(p["scored"]), real(value), p["band"],
             p["inputs_hash"], p["sidecar"], sha, ev.seq, p.get("inputs_key")),
        )
        self._mark_sessions_of(ev.source, p["iteration"], p["rubric_version"])

    def _transcript_turns(self, ev: Event, p: dict[str, Any]) -> None:
        self.touched.transcript_times.setdefault(ev.source, []).extend(f[1] for f in p["facts"])
        if p.get("superseded"):  # an open last line that continued: its old fact no longer stands
            where = ("source = ? AND file = ? AND byte_offset IN (SELECT value FROM json_each(?))",
                     (ev.source, p["file"], canonical_json(p["superseded"])))
            self.touched.transcript_times[ev.source].extend(
                r[0] for r in self.conn.execute("SELECT ts_ns FROM transcript_facts WHERE " + where[0], where[1]))
            self.conn.execute("DELETE FROM transcript_facts WHERE " + where[0], where[1])
        self.conn.executemany(
            "INSERT OR REPLACE INTO transcript_facts (source, file, byte_offset, ts_ns, kind, input_tokens,"
            " output_tokens, cache_read, cache_creation, turns, tool_results, tool_errors, seq)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(ev.source, p["file"], *f, ev.seq) for f in p["facts"]])

    def _source_reset(self, ev: Event, p: dict[str, Any]) -> None:
        if p.get("kind") == "transcript":  # the facts of the old content no longer stand
            times = [r[0] for r in self.conn.execute(
                "SELECT ts_ns FROM transcript_facts WHERE source = ? AND file = ?", (ev.source, p["path"]))]
            self.touched.transcript_times.setdefault(ev.source, []).extend(times)
            self.conn.execute("DELETE FROM transcript_facts WHERE source = ? AND file = ?", (ev.source, p["path"]))


def rebuild(conn: sqlite3.Connection, progress=None) -> int:
    """Drop every projection row and replay the whole log; returns events replayed.
    ``progress(done, total)``, when given, hears every 1,000 events."""
    from .db import write_transaction
    from .events import read

    count = 0
    total = conn.execute("SELECT count(*) FROM events").fetchone()[0] if progress else 0
    with write_transaction(conn):
        for table in PROJECTION_TABLES:
            conn.execute(f"DELETE FROM {table}")
        projector = Projector(conn, queue=False)
        for ev in read(conn):
            projector.apply(ev)
            count += 1
            if progress and count % 1000 == 0:
                progress(count, total)
        projector.flush()
    if progress:
        progress(count, total)
    return count
