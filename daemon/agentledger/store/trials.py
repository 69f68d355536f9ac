"""The trial family: vally runs and trials, ``trial.completed`` and ``run.summarized``
events → the ``runs`` and ``trials`` tables, with run counters moved by each trial's
delta, and the prepared form of a bulk batch that parsing workers hand the writer."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .events import Event, append_rows, canonical_json
from .events import row as event_row


def _shown(text: str) -> str:
    """A text column as the team ledger projects it: a NUL (which SQLite's text functions
    and most clients cut a string at, and JSONB cannot hold) becomes U+FFFD; the event
    keeps the exact text."""
    return text.replace("\x00", "\ufffd") if isinstance(text, str) else text


def trial_row(source: str, p: dict[str, Any]) -> tuple:
    """The ``trials`` row of a ``trial.completed`` payload, all but its ``seq``."""
    t, raw = p["trial"], p["raw"]
    return (source, p["run_dir"], *map(_shown, (t["item_id"], t["run_id"], t["eval_name"], t["stimulus"],
                                                t["model"], t["variant"])),
            t["trial_index"], _shown(t["status"]), t["duration_ms"],
            None if t["grade_passed"] is None else int(t["grade_passed"]), t["grade_score"], int(t["passed"]),
            t["input_tokens"], t["output_tokens"], t["cache_read_tokens"], t["cache_write_tokens"],
            t["tool_calls"], t["tool_errors"], t["turns"], raw["path"], raw["offset"], raw["length"],
            raw["sha256"], t.get("wall_time_ms"), t.get("total_tokens"), *_graders_passed(t.get("graders")))


def _graders_passed(graders: list | None) -> tuple[int | None, int | None]:
    """(passed, of) of a trial's graders, None when it reported none (report.md's "3/3")."""
    if not graders:
        return None, None
    return sum(1 for g in graders if g[1]), len(graders)


@dataclass
class PreparedTrials:
    """A bulk batch of ``trial.completed`` events made ready for the writer by a parsing
    worker: per event, its events row (``events.row``), its ``trial_row`` and its
    experiment name. Everything here is a pure function of the events, so the single
    writer only looks up keys, inserts and counts (a third less work per event than
    unpickling and projecting ``Event`` objects)."""

    items: list[tuple[tuple, tuple, str, list]]

    @classmethod
    def of(cls, events: list[Event]) -> PreparedTrials | None:
        """The prepared form of ``events``, or None when any is not a plain trial (the
        writer then takes the events themselves)."""
        items = []
        for ev in events:
            if ev.type != "trial.completed" or "facts" in ev.payload:
                return None
            t = ev.payload["trial"]
            items.append((event_row(ev), trial_row(ev.source, ev.payload), t["experiment"], t.get("graders") or []))
        return cls(items)

    def record(self, conn: sqlite3.Connection, trials: TrialFamily) -> tuple[int, int | None]:
        """Append the new events and project them (inside the caller's transaction):
        how many were new, and the last one's ``seq``."""
        items = self.items
        trials.prefetch_keys(item[1][:3] for item in items)
        last = None
        new = append_rows(conn, [item[0] for item in items])
        for i, seq in new:
            _, row, experiment, graders = items[i]
            trials.trial(row, experiment, seq, graders)
            last = seq
        return len(new), last


class TrialFamily:
    """Vally runs and trials. Trial rows are buffered and written once per flush;
    each trial's (passed, error) as of the events applied so far is kept (None: not
    stored), so a run's counters move by each trial's delta without a lookup."""

    tables = ("runs", "trials", "trial_graders")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.run_deltas: dict[tuple[str, str], list[int]] = {}  # (source, run_dir) -> [trials, passed, errors, seq]
        self._runs_known: dict[tuple[str, str], tuple] = {}  # runs already upserted in this transaction
        self._trial_rows: dict[tuple[str, str, str], tuple] = {}
        self._trial_state: dict[tuple[str, str, str], tuple[int, int] | None] = {}
        self._graders: dict[tuple[str, str, str], list] = {}  # each buffered trial's graders
        self._replaced: set[tuple[str, str, str]] = set()  # buffered trials that were stored before

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return {"trial.completed": self._trial_completed, "run.summarized": self._run_summarized}

    def flush(self) -> None:
        self._flush_trials()
        for (source, run_dir), (n, passed, errors, seq) in sorted(self.run_deltas.items()):
            self.conn.execute(
                "UPDATE runs SET trials = trials + ?, passed = passed + ?, errors = errors + ?,"
                " seq = max(seq, ?) WHERE source = ? AND run_dir = ?", (n, passed, errors, seq, source, run_dir))
        self.run_deltas.clear()

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
        self.trial(trial_row(ev.source, p), p["trial"]["experiment"], ev.seq,  # type: ignore[arg-type]
                   p["trial"].get("graders") or [])

    def trial(self, row: tuple, experiment: str, seq: int, graders: list) -> None:
        """One reported trial (``trial_row``, without its ``seq``, and its graders): the
        run, the trial's row and graders (a re-reported trial replaces them) and the
        run's counters."""
        source, run_dir, item = row[0], row[1], row[2]
        self._ensure_run(source, run_dir, row[3], "experiment" if experiment else "eval", experiment, row[7], seq)
        key = (source, run_dir, item)
        if key in self._trial_state:  # reported earlier in this transaction, or prefetched
            old = self._trial_state[key]
        else:
            old = self.conn.execute("SELECT passed, status = 'error' FROM trials WHERE source = ? AND run_dir = ?"
                                    " AND item_id = ?", key).fetchone()
        if old is not None:
            self._replaced.add(key)  # its graders from an earlier report go
        new = (row[13], int(row[9] == "error"))
        self._trial_state[key] = new
        self._trial_rows[key] = row + (seq,)
        self._graders[key] = graders
        if len(self._trial_rows) >= 5000:  # bound memory in long replays
            self._flush_trials(keep_state=True)
        # The run's counters move by this trial's delta (a re-reported trial replaces its row).
        d = self.run_deltas.setdefault((source, run_dir), [0, 0, 0, 0])
        d[0] += 0 if old else 1
        d[1] += new[0] - (old[0] if old else 0)
        d[2] += new[1] - (old[1] if old else 0)
        d[3] = max(d[3], seq or 0)

    def prefetch(self, events: list[Event]) -> None:
        """``prefetch_keys`` for the trials ``events`` report."""
        self.prefetch_keys((ev.source, ev.payload["run_dir"], ev.payload["trial"]["item_id"])
                                 for ev in events if ev.type == "trial.completed")

    def prefetch_keys(self, keys: Iterable[tuple[str, str, str]]) -> None:
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
                " raw_offset, raw_length, raw_sha256, wall_time_ms, total_tokens, graders_passed, graders_total,"
                " seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                list(self._trial_rows.values()))
            if self._replaced:
                self.conn.executemany("DELETE FROM trial_graders WHERE source = ? AND run_dir = ? AND item_id = ?",
                                      sorted(self._replaced))
            self.conn.executemany(
                "INSERT INTO trial_graders (source, run_dir, item_id, ordinal, name, passed, score)"
                " VALUES (?,?,?,?,?,?,?)",
                [(*key, k, name, None if passed is None else int(passed), score)
                 for key, graders in self._graders.items() for k, (name, passed, score) in enumerate(graders)])
        self._trial_rows.clear()
        self._graders.clear()
        self._replaced.clear()
        if not keep_state:
            self._trial_state.clear()

    def _run_summarized(self, ev: Event, p: dict[str, Any]) -> None:
        s = p["summary"]
        self._ensure_run(ev.source, p["run_dir"], s["run_id"], s["kind"], s["experiment"], s["variant"],
                         ev.seq)  # type: ignore[arg-type]
        self.conn.execute("UPDATE runs SET complete = ?, summary = ? WHERE source = ? AND run_dir = ?",
                          (int(s["complete"]), canonical_json(s), ev.source, p["run_dir"]))
