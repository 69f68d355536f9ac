"""The regressions and improvements the ledger noticed (the ``detections`` table, one
row per ``regression.detected`` / ``improvement.detected`` event), as people read them:
a row each, newest first, and one sentence each. ``status``, ``agentledger detections``
and the report's "what changed" all show them through here."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .. import terminal

COMMAND = "agentledger detections"
SHOWN_CHARS = 120


def shown(value: Any) -> str:
    """A value from the data (a model name, a path, a variant) fit for a terminal or a log
    line: ``terminal.shown``, at most ``SHOWN_CHARS`` characters."""
    return terminal.shown(value, SHOWN_CHARS)


def latest(conn: sqlite3.Connection, limit: int = 10, *, kind: str | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` detections (0: all), of ``kind`` (regression | improvement) or both."""
    where, args = ("WHERE kind = ?", [kind]) if kind else ("", [])
    rows = conn.execute(
        "SELECT seq, recorded_at, kind, feed, source, scope, metric, began, noticed, began_at, points, before,"
        f" after, size_sd, signals, changed FROM detections {where} ORDER BY seq DESC"
        + (" LIMIT ?" if limit else ""), [*args, *([limit] if limit else [])])
    out = []
    for r in rows:
        d = dict(zip(("seq", "recorded_at", "kind", "feed", "source", "scope", "metric", "began", "noticed",
                      "began_at", "points", "before", "after", "size_sd", "signals", "changed"), r))
        d["signals"], d["changed"] = json.loads(d["signals"]), json.loads(d["changed"])
        out.append(d)
    return out


def count(conn: sqlite3.Connection) -> dict[str, int]:
    return {k: n for k, n in conn.execute("SELECT kind, count(*) FROM detections GROUP BY kind ORDER BY kind")}


def stream(d: dict[str, Any]) -> str:
    """Which stream moved: ``iterations <source> score``, ``trials <source> [eval] pass_rate``."""
    scope = f" [{shown(d['scope'])}]" if d["scope"] else ""
    return f"{d['feed']} {shown(d['source'])}{scope} {shown(d['metric'])}"


def what_changed(d: dict[str, Any]) -> str:
    return "; ".join(f"{c['what']} {shown(c['from'])} → {shown(c['to'])} at {shown(c['at'])}" for c in d["changed"])


def sentence(d: dict[str, Any]) -> str:
    when = f" ({shown(d['began_at'][:10])})" if d["began_at"] else ""
    signals = ", ".join(f"{shown(s['signal'])} {s['size_sd']:+.1f} SD" for s in d["signals"])
    changed = what_changed(d)
    return (f"{d['kind']} of {stream(d)}: {d['before']:.3f} → {d['after']:.3f} ({d['size_sd']:+.2f} SD) since"
            f" {shown(d['began'])}{when}, noticed at {shown(d['noticed'])} ({d['points']} points)"
            + (f"; signals that moved: {signals}" if signals else "")
            + (f"; what changed: {changed}" if changed else ""))
