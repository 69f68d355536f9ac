"""Projections: tables folded from events, in the same transaction as the append.

``Projector.apply`` is the only code that writes projection tables, for live
appends and for ``rebuild`` alike, so a replay of the log reproduces them
exactly. Session aggregates are recomputed once per transaction for the
sessions an event touched (``flush``).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model import decode_float, is_int64
from ..output import sidecars
from ..scoring import rubric as rubrics
from .events import Event, append_rows, canonical_json
from .events import row as event_row

ANNOTATION_TABLES = ("trajectories", "trajectory_lines", "trajectory_hypotheses", "trajectory_delegations",
                     "trajectory_resources", "trajectory_sections", "trajectory_fields", "trajectory_terms")
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


def _real(x: float) -> float | None:
    return x if math.isfinite(x) else None


def trial_row(source: str, p: dict[str, Any]) -> tuple:
    """The ``trials`` row of a ``trial.completed`` payload, all but its ``seq``."""
    t, raw = p["trial"], p["raw"]
    return (source, p["run_dir"], t["item_id"], t["run_id"], t["eval_name"], t["stimulus"], t["model"],
            t["variant"], t["trial_index"], t["status"], t["duration_ms"],
            None if t["grade_passed"] is None else int(t["grade_passed"]), t["grade_score"], int(t["passed"]),
            t["input_tokens"], t["output_tokens"], t["cache_read_tokens"], t["cache_write_tokens"],
            t["tool_calls"], t["tool_errors"], t["turns"], raw["path"], raw["offset"], raw["length"],
            raw["sha256"])


@dataclass
class PreparedTrials:
    """A bulk batch of ``trial.completed`` events made ready for the writer by a parsing
    worker: per event, its events row (``events.row``), its ``trial_row`` and its
    experiment name. Everything here is a pure function of the events, so the single
    writer only looks up keys, inserts and counts (a third less work per event than
    unpickling and projecting ``Event`` objects)."""

    items: list[tuple[tuple, tuple, str]]

    @classmethod
    def of(cls, events: list[Event]) -> PreparedTrials | None:
        """The prepared form of ``events``, or None when any is not a plain trial (the
        writer then takes the events themselves)."""
        items = []
        for ev in events:
            if ev.type != "trial.completed" or "facts" in ev.payload:
                return None
            items.append((event_row(ev), trial_row(ev.source, ev.payload), ev.payload["trial"]["experiment"]))
        return cls(items)

    def record(self, conn: sqlite3.Connection, projector: Projector) -> tuple[int, int | None]:
        """Append the new events and project them (inside the caller's transaction):
        how many were new, and the last one's ``seq``."""
        items = self.items
        projector.prefetch_trial_keys(item[1][:3] for item in items)
        last = None
        new = append_rows(conn, [item[0] for item in items])
        for i, seq in new:
            _, row, experiment = items[i]
            projector.trial(row, experiment, seq)
            last = seq
        return len(new), last


class Projector:
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

    def _mark_sessions_of(self, source: str, iteration: int, version: str | None = None) -> None:
        """Mark the iteration's session for recompute: under ``version`` (a new score
        changes only its own rubric's summary), or under every rubric it has a score
        in (its record changed, and with it maybe its session)."""
        row = self.conn.execute("SELECT session_id FROM iterations WHERE source = ? AND iteration = ?",
                                (source, iteration)).fetchone()
        if row is None or not row[0]:
            return
        if version is not None:
            self.dirty_sessions.add((source, row[0], version))
            return
        for (version,) in self.conn.execute(
                "SELECT DISTINCT rubric_version FROM scores WHERE source = ? AND iteration = ?",
                (source, iteration)):
            self.dirty_sessions.add((source, row[0], version))

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
            " inputs_hash, sidecar, sidecar_sha256, seq) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (ev.source, p["iteration"], p["rubric_version"], int(p["scored"]), _real(value), p["band"],
             p["inputs_hash"], p["sidecar"], sha, ev.seq),
        )
        self._mark_sessions_of(ev.source, p["iteration"], p["rubric_version"])

    # -- vally ------------------------------------------------------------------------
    def _ensure_run(self, source: str, run_dir: str, run_id: str, kind: str, experiment: str,
                    variant: str, seq: int) -> None:
        key, facts = (source, run_dir), (run_id, kind, experiment, variant)
        if self._runs_known.get(key) == facts:
            return  # same run, same facts: seq is settled when the run is recomputed
        self._runs_known[key] = facts
        self.conn.execute(
            "INSERT INTO runs (source, run_dir, run_id, kind, experiment, variant, trials, passed, errors,"
            " complete, summary, seq) VALUES (?,?,?,?,?,?,0,0,0,0,NULL,?) ON CONFLICT (source, run_dir)"
            " DO UPDATE SET run_id = CASE WHEN excluded.run_id <> '' THEN excluded.run_id ELSE run_id END,"
            " experiment = CASE WHEN excluded.experiment <> '' THEN excluded.experiment ELSE experiment END,"
            " variant = CASE WHEN excluded.variant <> '' THEN excluded.variant ELSE variant END,"
            " kind = CASE WHEN excluded.kind = 'experiment' THEN 'experiment' ELSE kind END,"
            " seq = max(seq, excluded.seq)",
            (source, run_dir, run_id, kind, experiment, variant, seq))

    def _trial_completed(self, ev: Event, p: dict[str, Any]) -> None:
        self.trial(trial_row(ev.source, p), p["trial"]["experiment"], ev.seq)  # type: ignore[arg-type]
        if p.get("facts"):
            self._transcript_turns(ev, p)

    def trial(self, row: tuple, experiment: str, seq: int) -> None:
        """One reported trial (``trial_row``, without its ``seq``): the run, the trial's
        row (a re-reported trial replaces it) and the run's counters."""
        source, run_dir, item = row[0], row[1], row[2]
        self._ensure_run(source, run_dir, row[3], "experiment" if experiment else "eval", experiment, row[7], seq)
        key = (source, run_dir, item)
        if key in self._trial_state:  # reported earlier in this transaction, or prefetched
            old = self._trial_state[key]
        else:
            old = self.conn.execute("SELECT passed, status = 'error' FROM trials WHERE source = ? AND run_dir = ?"
                                    " AND item_id = ?", key).fetchone()
        new = (row[13], int(row[9] == "error"))
        self._trial_state[key] = new
        self._trial_rows[key] = row + (seq,)
        if len(self._trial_rows) >= 5000:  # bound memory in long replays
            self._flush_trials(keep_state=True)
        # The run's counters move by this trial's delta (a re-reported trial replaces its row).
        d = self.run_deltas.setdefault((source, run_dir), [0, 0, 0, 0])
        d[0] += 0 if old else 1
        d[1] += new[0] - (old[0] if old else 0)
        d[2] += new[1] - (old[1] if old else 0)
        d[3] = max(d[3], seq or 0)

    def prefetch_trials(self, events: list[Event]) -> None:
        """``prefetch_trial_keys`` for the trials ``events`` report."""
        self.prefetch_trial_keys((ev.source, ev.payload["run_dir"], ev.payload["trial"]["item_id"])
                                 for ev in events if ev.type == "trial.completed")

    def prefetch_trial_keys(self, keys: Iterable[tuple[str, str, str]]) -> None:
        """Load the stored (passed, error) state of the trials ``keys`` name (source,
        run_dir, item_id), one query per run directory, so ``trial`` needs no lookup
        per trial."""
        wanted: dict[tuple[str, str], list[str]] = {}
        for key in keys:
            if key not in self._trial_state:
                wanted.setdefault(key[:2], []).append(key[2])
        for (source, run_dir), items in wanted.items():
            for item in items:
                self._trial_state[(source, run_dir, item)] = None
            for r in self.conn.execute(
                    "SELECT item_id, passed, status = 'error' FROM trials WHERE source = ? AND run_dir = ?"
                    " AND item_id IN (SELECT value FROM json_each(?))", (source, run_dir, canonical_json(items))):
                self._trial_state[(source, run_dir, r[0])] = (r[1], r[2])

    def _flush_trials(self, *, keep_state: bool = False) -> None:
        """Write the buffered trial rows; the (small) per-trial state stays valid across a
        mid-transaction flush and is dropped at the transaction's end."""
        if self._trial_rows:
            self.conn.executemany(
                "INSERT OR REPLACE INTO trials (source, run_dir, item_id, run_id, eval_name, stimulus, model,"
                " variant, trial_index, status, duration_ms, grade_passed, grade_score, passed, input_tokens,"
                " output_tokens, cache_read_tokens, cache_write_tokens, tool_calls, tool_errors, turns, raw_path,"
                " raw_offset, raw_length, raw_sha256, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                list(self._trial_rows.values()))
        self._trial_rows.clear()
        if not keep_state:
            self._trial_state.clear()

    def _run_summarized(self, ev: Event, p: dict[str, Any]) -> None:
        s = p["summary"]
        self._ensure_run(ev.source, p["run_dir"], s["run_id"], s["kind"], s["experiment"], s["variant"],
                         ev.seq)  # type: ignore[arg-type]
        self.conn.execute("UPDATE runs SET complete = ?, summary = ? WHERE source = ? AND run_dir = ?",
                          (int(s["complete"]), canonical_json(s), ev.source, p["run_dir"]))

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

    # -- annotated trajectories ---------------------------------------------------------
    def _forget_annotation(self, source: str, path: str) -> None:
        for table in ANNOTATION_TABLES:
            self.conn.execute(f"DELETE FROM {table} WHERE source = ? AND path = ?", (source, path))

    def _annotation_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        from ..sources.annotation_parse import COMPUTED_FIELDS, KNOWN_FIELDS, V3_FIELDS
        from ..sources.annotations import normalise_term

        src, path, d = ev.source, p["path"], p["document"]
        self._forget_annotation(src, path)
        fm = d["frontmatter"]

        def text(key: str) -> str | None:
            v = fm.get(key)
            return None if v is None else v if isinstance(v, str) else canonical_json(v)

        def integer(key: str) -> int | None:
            v = fm.get(key)
            return v if is_int64(v) else None

        findings = [x["message"] for x in d["problems"] if x["kind"] == "verdict"]
        self.conn.execute(
            "INSERT INTO trajectories (source, path, sha256, format_version, task_id, title_id, score, score_norm,"
            " iterations, wall_time_ms, answer_type, task_group, answer, expected, error, failure_mode, verdict,"
            " frontmatter, extra, control_flow_lines, control_flow_lines_parsed, outcome_strip, hypothesis_arc,"
            " problems, verdict_findings, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (src, path, p["sha256"], d["format_version"], d["task_id"], d["title_id"], d["score"], d["score_norm"],
             integer("iterations"), integer("wallTimeMs"), text("answerType"), text("taskGroup"), text("answer"),
             text("expected"), text("error"), text("failureMode"), text("verdict"), canonical_json(fm),
             canonical_json({k: v for k, v in fm.items() if k not in KNOWN_FIELDS}), d["control_flow_lines"],
             d["control_flow_lines_parsed"], d["outcome_strip"], d["hypothesis_arc"], len(d["problems"]),
             canonical_json(findings), ev.seq))
        self.conn.executemany(
            "INSERT INTO trajectory_lines (source, path, ordinal, line_no, kind, iter_from, iter_to, iter_approx,"
            " delegation_id, parent_ordinal, phase_raw, phase, subphase, tags, hyp_ids, marker_raw, outcome,"
            " description, pseudo) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(src, path, ln["ordinal"], ln["line_no"], ln["kind"], ln["iter_from"], ln["iter_to"],
              int(ln["iter_approx"]), ln["delegation_id"], ln["parent_ordinal"], ln["phase_raw"], ln["phase"],
              ln["subphase"], canonical_json(ln["tags"]), canonical_json(ln["hyp_ids"]), ln["marker_raw"],
              ln["outcome"], ln["description"], int(ln["pseudo"])) for ln in d["flow"]])
        self.conn.executemany(
            "INSERT INTO trajectory_hypotheses (source, path, ordinal, line_no, hid, hypothesis, iters_raw, iters,"
            " outcome, outcome_note, superseded_by, evidence) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [(src, path, i, h["line_no"], h["hid"], h["text"], h["iters_raw"],
              None if h["iters"] is None else canonical_json(h["iters"]), h["outcome"], h["outcome_note"],
              h["superseded_by"], h["evidence"]) for i, h in enumerate(d["hypotheses"], 1)])
        self.conn.executemany(
            "INSERT INTO trajectory_delegations (source, path, ordinal, did, iters_used, row) VALUES (?,?,?,?,?,?)",
            [(src, path, i, (r.get("id") or "").replace("*", "").strip() or None, r.get("iters_used_n"),
              canonical_json(r)) for i, r in enumerate(d["delegations"], 1)])
        self.conn.executemany(
            "INSERT INTO trajectory_resources (source, path, resource, col, raw_value) VALUES (?,?,?,?,?)",
            [(src, path, *r) for r in d["resources"]])
        self.conn.executemany(
            "INSERT INTO trajectory_sections (source, path, ordinal, heading, body) VALUES (?,?,?,?,?)",
            [(src, path, sec["ordinal"], sec["heading"], sec["body"]) for sec in d["sections"]])
        declared, derived, agreement = d["declared"], d["derived"], d["agreement"]
        self.conn.executemany(
            "INSERT INTO trajectory_fields (source, path, name, declared, derived, agrees) VALUES (?,?,?,?,?,?)",
            [(src, path, name, canonical_json(declared[name]) if name in declared else None,
              canonical_json(derived[name]) if name in derived else None,
              None if agreement.get(name) is None else int(agreement[name]))
             for name in COMPUTED_FIELDS + V3_FIELDS if name in declared or name in derived])
        terms = {("pattern", t) for t in map(normalise_term, fm.get("patterns") or [] if isinstance(
            fm.get("patterns"), list) else []) if t}
        if (fm_mode := normalise_term(fm.get("failureMode"))) is not None:
            terms.add(("failure_mode", fm_mode))
        self.conn.executemany(
            "INSERT INTO trajectory_terms (source, path, vocabulary, term) VALUES (?,?,?,?)",
            [(src, path, v, t) for v, t in sorted(terms)])
        # This content supersedes any earlier quarantine of the file (an off-format
        # content is quarantined again by the event that follows this one).
        self._resolve_quarantine(src, path, ev.seq)  # type: ignore[arg-type]

    # -- sessions -------------------------------------------------------------------
    def _recompute_sessions(self, source: str, version: str, ids: list[str]) -> set[tuple[str, str, str]]:
        """Re-derive sessions of one source and rubric (three statements, however
        many sessions: a transcript line can touch a hundred of them); returns the
        keys whose row changed."""
        wanted = canonical_json(ids)
        old = {r[0]: (r[1], r[2]) for r in self.conn.execute(
            "SELECT session_id, sidecar_sha256, iterations FROM sessions WHERE source = ? AND rubric_version = ?"
            " AND session_id IN (SELECT value FROM json_each(?))", (source, version, wanted))}
        rows: dict[str, list] = {}
        for r in self.conn.execute(
                _SESSION_ROWS + " AND i.session_id IN (SELECT value FROM json_each(?)) ORDER BY i.session_id,"
                " i.iteration", (version, source, wanted)):
            rows.setdefault(r[0], []).append(r)
        changed, gone, upserts = set(), [], []
        band_of = rubrics.load(version).band
        for session_id in ids:
            if session_id not in rows:
                if session_id in old:
                    gone.append((source, session_id, version))
                    changed.add((source, session_id, version))
                continue
            entries, scored, value, band = _summarize(rows[session_id], band_of)
            name = sha = None
            if sidecars.unsafe_session_id(session_id) is None:
                name = sidecars.session_sidecar_name(session_id)
                data = sidecars.render_session(session_id, version, entries, scored, value, band)
                sha = sidecars.sha256(data)
                self.session_bytes[(source, session_id, version)] = (data, sha)
            iters = canonical_json([e.iteration for e in entries])
            upserts.append((source, session_id, version, iters, int(scored), _real(value), band, name, sha))
            if old.get(session_id) != (sha, iters):
                changed.add((source, session_id, version))
        self.conn.executemany("DELETE FROM sessions WHERE source = ? AND session_id = ? AND rubric_version = ?", gone)
        self.conn.executemany(
            "INSERT OR REPLACE INTO sessions (source, session_id, rubric_version, iterations, scored,"
            " value, band, sidecar, sidecar_sha256) VALUES (?,?,?,?,?,?,?,?,?)", upserts)
        return changed


_SESSION_ROWS = ("SELECT i.session_id, i.iteration, s.scored, s.value, s.band FROM iterations i JOIN scores s"
                 " ON s.source = i.source AND s.iteration = i.iteration AND s.rubric_version = ?"
                 " WHERE i.source = ?")


def _summarize(rows, band_of) -> tuple[list[sidecars.SessionEntry], bool, float, str]:
    """(entries, scored, value, band) from a session's (session_id, iteration, scored, value, band) rows."""
    entries = []
    for r in rows:
        value = r[3] if r[3] is not None else (math.nan if r[2] else 0.0)
        entries.append(sidecars.SessionEntry(r[1], bool(r[2]), value, r[4]))
    scored, value, band = sidecars.session_value(entries, band_of)
    return entries, scored, value, band


def session_summary(conn: sqlite3.Connection, source: str, session_id: str, version: str):
    """(entries, scored, value, band) of a session under one rubric, None if it has none."""
    rows = conn.execute(_SESSION_ROWS + " AND i.session_id = ? ORDER BY i.iteration",
                        (version, source, session_id)).fetchall()
    return _summarize(rows, rubrics.load(version).band) if rows else None


def session_document(conn: sqlite3.Connection, source: str, session_id: str, version: str) -> bytes | None:
    """The session sidecar bytes the ledger stands for (None: no session, or an unsafe id)."""
    summary = session_summary(conn, source, session_id, version)
    if summary is None or sidecars.unsafe_session_id(session_id) is not None:
        return None
    entries, scored, value, band = summary
    return sidecars.render_session(session_id, version, entries, scored, value, band)


def rebuild(conn: sqlite3.Connection) -> int:
    """Drop every projection row and replay the whole log; returns events replayed."""
    from .db import write_transaction
    from .events import read

    count = 0
    with write_transaction(conn):
        for table in PROJECTION_TABLES:
            conn.execute(f"DELETE FROM {table}")
        projector = Projector(conn, queue=False)
        for ev in read(conn):
            projector.apply(ev)
            count += 1
        projector.flush()
    return count
