"""The quarantine family: ``source.quarantined`` events → the ``quarantine`` table,
one row per problem, resolved by the next good content of the same path (any event
that records or removes a file: an off-format content is quarantined again by the
event that follows it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from .events import Event

# quarantine kinds of tailed files, whose records are about one line each: a file of
# any other kind (read whole) has at most one open problem, its newest
LINE_KINDS = ("vally", "transcript")


class QuarantineFamily:
    tables = ("quarantine",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # source -> the paths with an open problem, read once in this transaction (a family
        # lives for one: ``EventLog.batch``) and kept as it resolves and quarantines: the
        # events of many good files resolve nothing, and ask no statement of their own
        self._open: dict[str, set[str]] = {}

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        def by_file(ev: Event, p: dict[str, Any]) -> None:
            self.resolve(ev.source, p["file"], ev.seq)  # type: ignore[arg-type]

        def by_path(ev: Event, p: dict[str, Any]) -> None:
            self.resolve(ev.source, p["path"], ev.seq)  # type: ignore[arg-type]

        return {"source.quarantined": self.quarantined, "file.removed": by_file,
                **dict.fromkeys(("iteration.recorded", "historical.recorded", "hook_outcomes.recorded",
                                 "labels.recorded"), by_file),
                **dict.fromkeys(("artifact.recorded", "annotation.recorded"), by_path)}

    def flush(self) -> None:
        self._open.clear()  # (the next transaction reads them again)

    def _open_paths(self, source: str) -> set[str]:
        paths = self._open.get(source)
        if paths is None:
            paths = self._open[source] = {path for (path,) in self.conn.execute(
                "SELECT DISTINCT path FROM quarantine WHERE source = ? AND resolved_seq IS NULL", (source,))}
        return paths

    def resolve(self, source: str, path: str, seq: int) -> None:
        """Good content at ``path`` supersedes its open problems."""
        self.resolve_many([(seq, source, path)])

    def resolve_many(self, rows: list[tuple[int, str, str]]) -> None:
        """``resolve`` for each (seq, source, path), in order: only a path with an open
        problem is updated (the first of its rows resolves them all)."""
        todo = []
        for seq, source, path in rows:
            paths = self._open_paths(source)
            if path in paths:
                paths.discard(path)
                todo.append((seq, source, path))
        if todo:
            self.conn.executemany(
                "UPDATE quarantine SET resolved_seq = ? WHERE source = ? AND path = ? AND resolved_seq IS NULL", todo)

    def quarantined(self, ev: Event, p: dict[str, Any]) -> None:
        if p["kind"] not in LINE_KINDS:  # a file has one open problem: its newest
            self.resolve(ev.source, p["path"], ev.seq)  # type: ignore[arg-type]
        self.conn.execute(
            "INSERT INTO quarantine (source, path, kind, line, col, byte_offset, reason, content_hash, seq)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (ev.source, p["path"], p["kind"], p.get("line"), p.get("column"), p.get("byte_offset"),
             p["reason"], p.get("content_hash"), ev.seq))
        self._open_paths(ev.source).add(p["path"])  # type: ignore[arg-type]
