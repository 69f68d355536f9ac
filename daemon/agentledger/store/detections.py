"""The detection family: ``regression.detected`` / ``improvement.detected`` events →
the ``detections`` table; and ``DetectorCheckpoint``, where a feed of the change-point
detectors has read to, saved with the detections that reading produced."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .events import Event, canonical_json

TYPES = {"down": "regression.detected", "up": "improvement.detected"}


@dataclass(frozen=True)
class DetectorCheckpoint:
    """A feed's last point read (an iteration number or an event seq) and its
    detectors' state."""

    feed: str
    position: int
    state: dict[str, Any]

    def save(self, conn: sqlite3.Connection, last_seq: int | None) -> None:
        conn.execute(
            "INSERT INTO detector_checkpoints (feed, position, state, last_seq) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (feed) DO UPDATE SET position = excluded.position, state = excluded.state,"
            " last_seq = coalesce(excluded.last_seq, last_seq)",
            (self.feed, self.position, canonical_json(self.state), last_seq))


def load_checkpoint(conn: sqlite3.Connection, feed: str) -> tuple[int, dict[str, Any]] | None:
    import json

    row = conn.execute("SELECT position, state FROM detector_checkpoints WHERE feed = ?", (feed,)).fetchone()
    return None if row is None else (row[0], json.loads(row[1]))


class DetectionFamily:
    tables = ("detections",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return dict.fromkeys(TYPES.values(), self._detected)

    def flush(self) -> None:
        pass

    def _detected(self, ev: Event, p: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO detections (seq, kind, feed, source, scope, metric, began, noticed, began_at,"
            " points, before, after, size_sd, signals, changed, recorded_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (ev.seq, ev.type.split(".")[0], p["feed"], ev.source, p["scope"], p["metric"], p["began"]["label"],
             p["noticed"]["label"], p["began"].get("at"), p["points"], p["before"], p["after"], p["size_sd"],
             canonical_json(p["signals"]), canonical_json(p["changed"]), ev.recorded_at))
