"""The transcript family: per-turn facts of Claude transcripts and vally trajectories
(``transcript.turns``, ``trial.completed`` with facts) → ``transcript_facts``, which the
scorer's transcript windows sum. A fact that no longer stands (a reset file, an open
last line that continued) leaves, and its time is noted so its window is rescored."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from .events import Event, canonical_json
from .touched import Touched


class TranscriptFamily:
    tables = ("transcript_facts",)

    def __init__(self, conn: sqlite3.Connection, touched: Touched) -> None:
        self.conn = conn
        self.touched = touched

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return {"transcript.turns": self._turns, "trial.completed": self._trial_completed,
                "source.reset": self._source_reset}

    def flush(self) -> None:
        pass

    def _times(self, source: str) -> list[int]:
        return self.touched.transcript_times.setdefault(source, [])

    def _trial_completed(self, ev: Event, p: dict[str, Any]) -> None:
        if p.get("facts"):
            self._turns(ev, p)

    def _turns(self, ev: Event, p: dict[str, Any]) -> None:
        self._times(ev.source).extend(f[1] for f in p["facts"])
        if p.get("superseded"):  # an open last line that continued: its old fact no longer stands
            where = ("source = ? AND file = ? AND byte_offset IN (SELECT value FROM json_each(?))",
                     (ev.source, p["file"], canonical_json(p["superseded"])))
            self._times(ev.source).extend(
                r[0] for r in self.conn.execute("SELECT ts_ns FROM transcript_facts WHERE " + where[0], where[1]))
            self.conn.execute("DELETE FROM transcript_facts WHERE " + where[0], where[1])
        self.conn.executemany(
            "INSERT OR REPLACE INTO transcript_facts (source, file, byte_offset, ts_ns, kind, input_tokens,"
            " output_tokens, cache_read, cache_creation, turns, tool_results, tool_errors, model, cache_write_1h,"
            " seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(ev.source, p["file"], *f, *(None,) * (12 - len(f)), ev.seq) for f in p["facts"]])  # v1: 10 long

    def _source_reset(self, ev: Event, p: dict[str, Any]) -> None:
        if p.get("kind") == "transcript":  # the facts of the old content no longer stand
            times = [r[0] for r in self.conn.execute(
                "SELECT ts_ns FROM transcript_facts WHERE source = ? AND file = ?", (ev.source, p["path"]))]
            self._times(ev.source).extend(times)
            self.conn.execute("DELETE FROM transcript_facts WHERE source = ? AND file = ?", (ev.source, p["path"]))
