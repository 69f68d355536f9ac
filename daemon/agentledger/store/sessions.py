"""The session family: each (source, session, rubric)'s summary of its iterations'
scores, recomputed once per transaction for the sessions an event touched, and the
session sidecar bytes it stands for."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from typing import Any

from ..output import sidecars
from ..scoring import rubric as rubrics
from .events import Event, canonical_json


def real(x: float) -> float | None:
    return x if math.isfinite(x) else None


class SessionFamily:
    """Session aggregates. Other families mark a session dirty when an iteration's
    record or score changes (``mark``); ``flush`` recomputes each dirty one once per
    transaction and keeps the sidecar bytes it rendered (``session_bytes``) for the
    writer."""

    tables = ("sessions", "session_sidecars")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.dirty: set[tuple[str, str, str]] = set()  # (source, session, rubric)
        self._marked: set[tuple[str, int, str | None]] = set()  # (source, iteration, rubric or every one)
        self._left: set[tuple[str, str, int]] = set()  # (source, session, iteration that left it)
        # (bytes, sha256) of each session sidecar rendered by recompute: the writer reuses both
        self.session_bytes: dict[tuple[str, str, str], tuple[bytes, str]] = {}

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return {}  # moved by the iteration and score families, through ``mark``

    def mark(self, source: str, iteration: int, version: str | None = None) -> None:
        """Mark the iteration's session for recompute: under ``version`` (a new score
        changes only its own rubric's summary), or under every rubric it has a score in
        (its record changed, and with it maybe its session). Resolved at ``flush``, for
        the whole transaction in two queries (a cold ingest marks 20,000 of them)."""
        self._marked.add((source, iteration, version))

    def mark_left(self, source: str, session_id: str | None, iteration: int) -> None:
        """The session ``iteration`` was in before its row was replaced (the caller read it
        from the row it deleted): recomputed under every rubric the iteration has a score in."""
        if session_id:
            self._left.add((source, session_id, iteration))

    def flush(self) -> None:
        self._resolve()
        groups: dict[tuple[str, str], list[str]] = {}
        for source, session_id, version in sorted(self.dirty):
            groups.setdefault((source, version), []).append(session_id)
        for (source, version), ids in groups.items():
            self._recompute(source, version, ids)
        self.dirty.clear()

    def _resolve(self) -> None:
        """The marked iterations' sessions (from their rows now) and rubrics, into ``dirty``.
        A row that changed session meanwhile had its old session marked by ``mark_left``,
        so resolving late marks what marking at once would have, and no less."""
        marked, left = self._marked, self._left
        self._marked, self._left = set(), set()
        for source in sorted({m[0] for m in marked} | {m[0] for m in left}):
            # every rubric an iteration has a score in: only for those marked without one
            # (a scoring pass names its rubric for each: a backfill needs none of this)
            every = {it for s, it, v in marked if s == source and v is None} | {it for s, _, it in left if s == source}
            its = sorted({it for s, it, _ in marked if s == source} | every)
            sessions = dict(self.conn.execute(
                "SELECT iteration, session_id FROM iterations WHERE source = ? AND iteration IN"
                " (SELECT value FROM json_each(?))", (source, json.dumps(its))))
            versions: dict[int, list[str]] = {}
            if every:
                for it, version in self.conn.execute(
                        "SELECT DISTINCT iteration, rubric_version FROM scores WHERE source = ? AND iteration IN"
                        " (SELECT value FROM json_each(?))", (source, json.dumps(sorted(every)))):
                    versions.setdefault(it, []).append(version)
            for s, it, version in marked:
                session_id = sessions.get(it) if s == source else None
                if session_id:
                    self.dirty.update((source, session_id, v) for v in ((version,) if version else versions.get(it, ())))
            for s, session_id, it in left:
                if s == source:
                    self.dirty.update((source, session_id, v) for v in versions.get(it, ()))

    # -- sessions -------------------------------------------------------------------
    def _recompute(self, source: str, version: str, ids: list[str]) -> None:
        """Re-derive sessions of one source and rubric (three statements, however
        many sessions: a transcript line can touch a hundred of them)."""
        wanted = canonical_json(ids)
        rows: dict[str, list] = {}
        for r in self.conn.execute(
                _SESSION_ROWS + " AND i.session_id IN (SELECT value FROM json_each(?)) ORDER BY i.session_id,"
                " i.iteration", (version, source, wanted)):
            rows.setdefault(r[0], []).append(r)
        gone, upserts, kept = [], [], []
        band_of = rubrics.load(version).band
        for session_id in ids:
            if session_id not in rows:  # its last iteration left it (a no-op when it never had a row)
                gone.append((source, session_id, version))
                continue
            entries, scored, value, band = _summarize(rows[session_id], band_of)
            name = sha = None
            if sidecars.unsafe_session_id(session_id) is None:
                name = sidecars.session_sidecar_name(session_id)
                data = sidecars.render_session(session_id, version, entries, scored, value, band)
                sha = sidecars.sha256(data)
                self.session_bytes[(source, session_id, version)] = (data, sha)
                kept.append((source, session_id, version, data))  # (an unsafe id's: never kept)
            iters = canonical_json([e.iteration for e in entries])
            upserts.append((source, session_id, version, iters, int(scored), real(value), band, name, sha))
        self.conn.executemany("DELETE FROM sessions WHERE source = ? AND session_id = ? AND rubric_version = ?", gone)
        self.conn.executemany("DELETE FROM session_sidecars WHERE source = ? AND session_id = ? AND rubric_version = ?",
                              gone)
        self.conn.executemany(
            "INSERT OR REPLACE INTO sessions (source, session_id, rubric_version, iterations, scored,"
            " value, band, sidecar, sidecar_sha256) VALUES (?,?,?,?,?,?,?,?,?)", upserts)
        self.conn.executemany(
            "INSERT OR REPLACE INTO session_sidecars (source, session_id, rubric_version, bytes) VALUES (?,?,?,?)", kept)


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


def session_summary(conn: sqlite3.Connection, source: str, session_id: str, version: str, rows=None):
    """(entries, scored, value, band) of a session under one rubric, None if it has none.
    ``rows``: its rows as ``session_rows`` gave them (else read here)."""
    if rows is None:
        rows = conn.execute(_SESSION_ROWS + " AND i.session_id = ? ORDER BY i.iteration",
                            (version, source, session_id)).fetchall()
    return _summarize(rows, rubrics.load(version).band) if rows else None


def session_rows(conn: sqlite3.Connection, source: str, version: str) -> dict[str, list]:
    """Every session's rows under one rubric, in one query (a sync of hundreds of session
    sidecars asked once a session)."""
    out: dict[str, list] = {}
    for r in conn.execute(_SESSION_ROWS + " ORDER BY i.session_id, i.iteration", (version, source)):
        out.setdefault(r[0], []).append(r)
    return out


def session_document(conn: sqlite3.Connection, source: str, session_id: str, version: str,
                     rows=None) -> bytes | None:
    """The session sidecar bytes the ledger stands for (None: no session, or an unsafe id);
    ``rows``: as ``session_summary``'s."""
    summary = session_summary(conn, source, session_id, version, rows)
    if summary is None or sidecars.unsafe_session_id(session_id) is not None:
        return None
    entries, scored, value, band = summary
    return sidecars.render_session(session_id, version, entries, scored, value, band)
