"""The iteration family: iteration logs → ``record_files`` (every record each file
carries), ``iterations`` (the effective record of each iteration: a dedicated
``iter-N.yaml`` over the archive), ``hook_outcomes``, ``labels`` and ``artifacts``.
What changes is noted in ``Touched`` for the planner, and the sessions of changed
iterations are marked for recompute."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from .. import names
from .events import Event, canonical_json
from .sessions import SessionFamily
from .touched import Touched

# what a record points at, as [[kind, raw path], …] (a full scan stats these: ledger/iterlogs.py)
_REFS = ("(SELECT json_group_array(json_array(k, p)) FROM (SELECT 'verifier_result' AS k,"
         " json_extract(v.value, '$.result_artifact') AS p FROM json_each(record, '$.verifiers') v"
         " UNION ALL SELECT 'review_decision', json_extract(record, '$.review.decision_artifact'))"
         " WHERE p IS NOT NULL AND p <> '' AND p <> 0)")

# an iteration's row, derived from its records (FROM what follows): its dedicated file
# over the archive, the newest such record first (_BEST)
_DERIVE = ("INSERT INTO iterations (source, iteration, file, ordinal, kind, schema_version, date, task_id,"
           " commit_ref, session_id, content_hash, seq, artifact_refs)"
           " SELECT source, iteration, file, ordinal, kind, json_extract(record, '$.schema_version'),"
           " json_extract(record, '$.date'), json_extract(record, '$.task_id'),"
           " json_extract(record, '$.commit'), json_extract(record, '$.agent.session_id'),"
           " content_hash, seq, nullif(" + _REFS + ", '[]') FROM ")
_BEST = "kind = 'dedicated' DESC, CASE WHEN kind = 'dedicated' THEN file END DESC, ordinal DESC"

# quarantined artifacts read as "not available", as the reference reads a broken one
_ARTIFACT_KINDS = ("verifier_result", "review_decision", "tasks")


def projected(ev: Event) -> None:
    """Keep in a record event's in-memory payload only what this family's handlers read of
    it (the file, each record's iteration): the records themselves are taken out of the
    stored payload by SQLite. A parsing worker does this once the event's JSON text
    (``extra['json']``: what is stored and hashed) is made, so the committing process does
    not unpickle every record (~95 us a file at 10,000 iterations)."""
    p = ev.payload
    if ev.type == "iteration.recorded":
        ev.payload = {"file": p["file"], "record": {"iteration": p["record"]["iteration"]}}
    elif ev.type == "historical.recorded":
        ev.payload = {"file": p["file"], "records": [{"iteration": r["iteration"]} for r in p["records"]]}


class IterationFamily:
    tables = ("record_files", "iterations", "hook_outcomes", "labels", "artifacts")

    def __init__(self, conn: sqlite3.Connection, touched: Touched, sessions: SessionFamily) -> None:
        self.conn = conn
        self.touched = touched
        self.sessions = sessions

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return {"iteration.recorded": self._iteration_recorded, "historical.recorded": self._historical_recorded,
                "hook_outcomes.recorded": self._hook_outcomes_recorded, "labels.recorded": self._labels_recorded,
                "artifact.recorded": self._artifact_recorded, "file.removed": self._file_removed,
                "source.quarantined": self._source_quarantined}

    def flush(self) -> None:
        pass

    # -- helpers ----------------------------------------------------------------
    def _iterations_of_file(self, source: str, file: str) -> set[int]:
        return {r[0] for r in self.conn.execute(
            "SELECT iteration FROM record_files WHERE source = ? AND file = ?", (source, file))}

    def _refresh_iteration(self, source: str, iteration: int) -> None:
        """Re-derive the effective record of one iteration from record_files."""
        self.touched.iterations.add((source, iteration))
        for (session_id,) in self.conn.execute("DELETE FROM iterations WHERE source = ? AND iteration = ?"
                                               " RETURNING session_id", (source, iteration)).fetchall():
            self.sessions.mark_left(source, session_id, iteration)
        self.conn.execute(_DERIVE + "record_files WHERE source = ? AND iteration = ? ORDER BY " + _BEST + " LIMIT 1",
                          (source, iteration))
        self.sessions.mark(source, iteration)

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

    def _touch_side(self, source: str, table: str, file: str) -> None:
        for (it,) in self.conn.execute(f"SELECT iteration FROM {table} WHERE source = ? AND file = ?", (source, file)):
            self.touched.iterations.add((source, it))

    # -- handlers -----------------------------------------------------------------
    def _iteration_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        self._replace_records(ev, p["file"], "dedicated", "$.record", 1, [p["record"]["iteration"]])

    def iterations_recorded(self, source: str, events: list[Event]) -> None:
        """``_iteration_recorded`` for a run of events of one source, each of another file,
        in a few statements (a cold ingest of 10,000 records made seven a record). The
        same rows: every record is replaced first, then each iteration it touched is
        derived once from the records they leave, as one event after another would leave
        them (a dedicated file carries one iteration, its own)."""
        files = json.dumps([ev.payload["file"] for ev in events])
        before = [r[0] for r in self.conn.execute(
            "SELECT iteration FROM record_files WHERE source = ? AND file IN (SELECT value FROM json_each(?))",
            (source, files))]
        self.conn.execute("DELETE FROM record_files WHERE source = ? AND file IN (SELECT value FROM json_each(?))",
                          (source, files))
        self.conn.execute(
            "INSERT INTO record_files (source, file, ordinal, iteration, kind, record, content_hash, seq)"
            " SELECT ?, json_extract(payload, '$.file'), 0, json_extract(payload, '$.record.iteration'), 'dedicated',"
            " json_extract(payload, '$.record'), content_hash, seq FROM events"
            " WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq",
            (source, json.dumps([ev.seq for ev in events])))
        iterations = sorted(set(before) | {ev.payload["record"]["iteration"] for ev in events})
        its = json.dumps(iterations)
        self.touched.iterations.update((source, it) for it in iterations)
        for it, session_id in self.conn.execute("DELETE FROM iterations WHERE source = ? AND iteration IN"
                                                " (SELECT value FROM json_each(?)) RETURNING iteration, session_id",
                                                (source, its)).fetchall():
            self.sessions.mark_left(source, session_id, it)
        self.conn.execute(_DERIVE + "(SELECT *, row_number() OVER (PARTITION BY iteration ORDER BY " + _BEST + ")"
                          " AS best FROM record_files WHERE source = ? AND iteration IN (SELECT value FROM json_each(?)))"
                          " WHERE best = 1 ORDER BY iteration", (source, its))
        for it in iterations:
            self.sessions.mark(source, it)

    def _historical_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        recs = p["records"]
        self._replace_records(ev, p["file"], "historical", "$.records[{i}]", len(recs),
                              [r["iteration"] for r in recs])

    def _side_file(self, table: str, count_key: str, ev: Event, p: dict[str, Any]) -> None:
        """hook_outcomes / labels: one row per iteration, the parsed outcome or its error.
        Only the file the grammar names for the iteration speaks for it (``names.py``): an
        event of any other file (an older ledger's, an import's) changes nothing, so its
        removal cannot retract the canonical file's outcome."""
        if p["file"] != names.iteration_file(table, p["iteration"]):
            return
        o = p["outcome"]
        self.touched.iterations.add((ev.source, p["iteration"]))
        self.conn.execute(
            f"INSERT OR REPLACE INTO {table} (source, iteration, file, outcome, {count_key}, error,"
            " content_hash, seq) VALUES (?,?,?,?,?,?,?,?)",
            (ev.source, p["iteration"], p["file"], canonical_json(o), len(o[count_key]), o["error"],
             ev.content_hash, ev.seq),
        )

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

    def _file_removed(self, ev: Event, p: dict[str, Any]) -> None:
        path, kind = p["file"], p["kind"]
        if kind in ("annotation", names.MISNAMED):
            return  # the trajectory family's; a misnamed file stood for nothing
        if kind in ("record", "historical"):
            self._replace_records(ev, path, "dedicated", None, 0, [])
        elif kind in ("hook_outcomes", "labels"):
            self._touch_side(ev.source, kind, path)
            self.conn.execute(f"DELETE FROM {kind} WHERE source = ? AND file = ?", (ev.source, path))
        else:
            self.touched.artifacts.add((ev.source, path))
            self.conn.execute("DELETE FROM artifacts WHERE source = ? AND path = ?", (ev.source, path))

    def _source_quarantined(self, ev: Event, p: dict[str, Any]) -> None:
        if p["kind"] in _ARTIFACT_KINDS:
            self.touched.artifacts.add((ev.source, p["path"]))
            self.conn.execute("DELETE FROM artifacts WHERE source = ? AND path = ?", (ev.source, p["path"]))
