"""Commands that read the ledger (read-only connections): ``status``, ``quarantine``,
``trials``, ``runs``, ``query``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys

from ..store.db import read_state
from ..terminal import shown, shown_lines
from .common import (
    EXIT_FAIL,
    EXIT_OK,
    Failure,
    UsageError,
    add_timeout_flag,
    count,
    print_rows,
    read_only,
    table,
)


def add_commands(cmd) -> None:
    p = cmd("status", "Counts, active rubric, quarantine, last event, sources.")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_status)

    p = cmd("quarantine", "List files (and lines) that could not be ingested, with the reason.")
    p.add_argument("--all", action="store_true", help="include entries resolved by a later good version")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_quarantine)

    p = cmd("trials", "List vally trials (filters combine).")
    p.add_argument("--run", metavar="DIR", help="run directory (relative to its vally source), or a part of it")
    p.add_argument("--eval", metavar="NAME", dest="eval_name", help="eval name")
    p.add_argument("--model", metavar="MODEL")
    p.add_argument("--variant", metavar="NAME")
    p.add_argument("--status", metavar="STATUS", help="success | error | skipped")
    p.add_argument("--failed", action="store_true", help="only trials that did not pass")
    p.add_argument("--limit", type=count, default=200, help="at most this many rows (default 200; 0: all)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_trials)

    p = cmd("runs", "List vally runs with trial counts, pass counts and completeness.")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_runs)

    p = cmd("query", "Run one SQL query on a read-only connection to the ledger.")
    p.add_argument("sql", nargs="?", help="the query (with --central and no URL: right after --central is fine)")
    p.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="a named parameter: -p since 2026-01-01 for :since in the SQL (repeatable)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="rows as a JSON array of objects")
    fmt.add_argument("--nl", action="store_true", help="rows as JSON lines, one object a line")
    fmt.add_argument("--csv", action="store_true", help="rows as CSV with a header")
    p.add_argument("--central", nargs="?", const="", metavar="URL",
                   help="query the team ledger (PostgreSQL; default: the one [[ship]] entry): one read statement,"
                        " in a read-only transaction")
    add_timeout_flag(p)
    p.set_defaults(func=cmd_query)


def cmd_status(args: argparse.Namespace) -> int:
    from ..analysis import detections

    cfg, conn = read_only(args)

    def one(sql: str, *a):
        row = conn.execute(sql, a).fetchone()
        return row[0] if row else None

    last = conn.execute("SELECT seq, type, recorded_at, source_path FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    data = {
        "store": str(cfg.store.path),
        "active_rubric": read_state(conn, "active_rubric"),
        "configured_rubric": cfg.scoring.rubric,
        "configured_rubric_seen": read_state(conn, "configured_rubric"),
        "backfill_in_progress": read_state(conn, "backfill") is not None,
        "events": one("SELECT count(*) FROM events"),
        "iterations": one("SELECT count(*) FROM iterations"),
        "scores": {r[0]: r[1] for r in conn.execute(
            "SELECT rubric_version, count(*) FROM scores GROUP BY rubric_version ORDER BY rubric_version")},
        "sessions": one("SELECT count(DISTINCT source || char(0) || session_id) FROM sessions"),
        "trials": one("SELECT count(*) FROM trials"),
        "trajectories": one("SELECT count(*) FROM trajectories"),
        "quarantined": one("SELECT count(*) FROM quarantine WHERE resolved_seq IS NULL"),
        "sidecars_not_written": one("SELECT count(*) FROM sidecar_problems"),
        "detections": detections.count(conn),
        "latest_detections": detections.latest(conn, 3),
        "last_event": dict(last) if last else None,
        "sources": [_source_status(conn, dict(r)) for r in conn.execute(
            "SELECT source, kind, root, repo, trunk, seen_at FROM sources ORDER BY kind, source")],
        "ledger_id": one("SELECT ledger_id FROM ledger_identity"),
        "shipping": _shipping_status(conn, cfg),
    }
    conn.close()
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(f"ledger        {data['store']}  (id {data['ledger_id']})")
    rub = data["active_rubric"] or "(none yet)"
    if data["active_rubric"] and data["configured_rubric_seen"] != cfg.scoring.rubric:
        if data["active_rubric"] != cfg.scoring.rubric:
            rub += f" (configured: {cfg.scoring.rubric}; the next ingest or score activates it and backfills)"
    elif data["active_rubric"] and data["active_rubric"] != cfg.scoring.rubric:
        rub += (f" (activated with --rubric; configured: {cfg.scoring.rubric}, which activates again"
                " once the configured value changes)")
    print(f"rubric        {rub}" + ("  [backfill in progress]" if data["backfill_in_progress"] else ""))
    print(f"events        {data['events']}")
    print(f"iterations    {data['iterations']}")
    print("scores        " + (", ".join(f"{v} under {k}" for k, v in data["scores"].items()) or "0"))
    print(f"sessions      {data['sessions']}")
    if data["trials"]:
        print(f"trials        {data['trials']}")
    if data["trajectories"]:
        print(f"trajectories  {data['trajectories']}")
    print(f"quarantined   {data['quarantined']}" + ("  (see `agentledger quarantine`)" if data["quarantined"] else ""))
    if data["sidecars_not_written"]:
        print(f"not written   {data['sidecars_not_written']} sidecar(s)  (see `agentledger quarantine`)")
    if data["detections"]:
        print("detections    " + ", ".join(f"{n} {k}(s)" for k, n in data["detections"].items())
              + "  (see `agentledger detections`); latest:")
        for d in data["latest_detections"]:
            print(f"              {d['recorded_at'][:10]} {detections.sentence(d)}")
    if last:
        print(f"last event    #{last['seq']} {last['type']} at {last['recorded_at']}")
    for s in data["sources"]:
        if s["kind"] == "iteration_log":
            print(f"source        {s['root']}  (repo {s['repo']}, trunk {s['trunk']}; "
                  f"{s['files']} files, {s['iterations']} iterations)")
        elif s["kind"] == "annotations":  # whole files, not tailed: no offsets
            print(f"source        {s['root']}  (annotations; {s['files']} files, {s['trajectories']} trajectories)")
        else:
            print(f"source        {s['root']}  ({s['kind']}; {s['files']} files, {s['bytes_read']} bytes read, "
                  f"{s['lag_bytes']} bytes behind)")
            for f in s["tailed"]:
                if f["lag_bytes"]:
                    print(f"                {f['path']}: offset {f['offset']}, {f['lag_bytes']} bytes behind")
    for d in data["shipping"]:
        print(f"shipped to    {d['destination']}  (up to #{d['cursor']}, {d['behind']} events behind"
              + (f", last at {d['shipped_at']})" if d["shipped_at"] else "; never yet)"))
    return EXIT_OK


def _shipping_status(conn, cfg) -> list[dict]:
    """Per team ledger (configured, or shipped to before): how far this ledger got there."""
    cursors = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT destination, last_seq, shipped_at FROM ship_cursors")}
    names = list(dict.fromkeys([d.label for d in cfg.ship] + list(cursors)))
    out = []
    for name in names:
        cursor, at = cursors.get(name, (0, None))
        behind = conn.execute("SELECT count(*) FROM events WHERE seq > ?", (cursor,)).fetchone()[0]
        out.append({"destination": name, "cursor": cursor, "behind": behind, "shipped_at": at})
    return out


def _source_status(conn, src: dict) -> dict:
    """Files tracked, and for tailed sources each file's offset and lag (bytes behind its end)."""
    from pathlib import Path

    src["files"] = conn.execute("SELECT count(*) FROM source_checkpoints WHERE source = ?",
                                (src["source"],)).fetchone()[0]
    if src["kind"] == "iteration_log":
        src["iterations"] = conn.execute("SELECT count(*) FROM iterations WHERE source = ?",
                                         (src["source"],)).fetchone()[0]
        return src
    if src["kind"] == "annotations":
        src["trajectories"] = conn.execute("SELECT count(*) FROM trajectories WHERE source = ?",
                                           (src["source"],)).fetchone()[0]
        return src
    tailed = []
    for path, offset, line_no in conn.execute(
            "SELECT path, byte_offset, line_no FROM source_checkpoints WHERE source = ? ORDER BY path",
            (src["source"],)):
        try:
            size = (Path(src["root"]) / path).stat().st_size
        except OSError:
            size = None
        tailed.append({"path": path, "offset": offset, "lines": line_no, "size": size,
                       "lag_bytes": max(size - offset, 0) if size is not None else None})
    src["tailed"] = tailed
    src["bytes_read"] = sum(f["offset"] for f in tailed)
    src["lag_bytes"] = sum(f["lag_bytes"] or 0 for f in tailed)
    return src


def cmd_quarantine(args: argparse.Namespace) -> int:
    _, conn = read_only(args)
    sql = ("SELECT q.id, q.source, q.path, q.kind, q.line, q.col AS column, q.byte_offset, q.reason,"
           " q.content_hash, q.seq, q.resolved_seq, e.recorded_at,"
           " CASE WHEN q.kind IN ('verifier_result', 'review_decision', 'tasks')"
           " THEN coalesce(s.repo, q.source) ELSE q.source END AS base"
           " FROM quarantine q JOIN events e ON e.seq = q.seq LEFT JOIN sources s ON s.source = q.source")
    if not args.all:
        sql += " WHERE q.resolved_seq IS NULL"
    rows = [dict(r) for r in conn.execute(sql + " ORDER BY q.seq")]
    # sidecars that could not be written: problems of the output, listed with those of the input
    problems = [{"kind": "sidecar", "path": r[0], "full_path": r[0], "reason": r[1], "since": r[2]}
                for r in conn.execute("SELECT path, reason, since FROM sidecar_problems ORDER BY since, path")]
    conn.close()
    for r in rows:
        r["full_path"] = os.path.join(r.pop("base"), r["path"])
    if args.json:
        print(json.dumps(rows + problems, indent=2))
        return EXIT_OK
    if not rows and not problems:
        print("nothing quarantined")
    for r in problems:
        print(f"{shown(r['path'])}  (sidecar not written, since {r['since']})\n    {shown(r['reason'])}")
    for r in rows:
        pos = f":{r['line']}" if r["line"] else (f"@{r['byte_offset']}" if r["byte_offset"] is not None else "")
        if r["line"] and r["column"]:
            pos += f":{r['column']}"
        where = shown(r["full_path"])
        state = "  (resolved)" if r["resolved_seq"] else ""
        reason = shown_lines(r["reason"]).replace("\n", "\n    ")
        print(f"{where}{pos}{state}\n    {reason}")
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    if args.sql is None and args.central and not args.central.startswith(("postgresql://", "postgres://")):
        args.sql, args.central = args.central, ""  # `query --central "SQL"`: argparse gave the SQL to --central
    if not args.sql:
        raise UsageError("query needs the SQL to run")
    if args.central is not None:
        from ..central import read as central
        from .team import destination

        dest = destination(args, args.central)
        try:
            columns, rows = central.query(dest.url, args.sql, dict(args.param), label=dest.label,
                                          timeout=args.timeout)
        except central.QueryError as exc:
            print(f"agentledger: query failed: {exc}", file=sys.stderr)
            return EXIT_FAIL
        except central.CentralError as exc:
            raise Failure(str(exc)) from None
    else:
        fetched = _query_local(args)
        if fetched is None:
            return EXIT_FAIL
        columns, rows = fetched
    if args.json:
        print(json.dumps([dict(zip(columns, r)) for r in rows], indent=2, default=str))
    elif args.nl:
        for r in rows:
            print(json.dumps(dict(zip(columns, r)), default=str))
    elif args.csv:
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        table([dict(zip(columns, r)) for r in rows], columns)
    return EXIT_OK


def _query_local(args: argparse.Namespace) -> tuple[list[str], list] | None:
    import sqlite3

    from ..store.db import refuse_side_effects
    from ..store.migrate import sqlite_utils_module

    sqlite_utils = sqlite_utils_module()

    _, conn = read_only(args)
    db = sqlite_utils.Database(conn)  # before the authorizer: it sets a PRAGMA of its own
    # memory bounded as well as time: no value over QUERY_VALUE_BYTES (this connection's
    # limit), no result over QUERY_RESULT_BYTES (counted as it is fetched), and, where this
    # process runs this one query, SQLite's hard heap limit (process-wide, and it can only
    # be lowered: never set in a process that goes on to other work)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, QUERY_VALUE_BYTES)
    if getattr(args, "own_process", False):
        conn.execute(f"PRAGMA hard_heap_limit = {QUERY_HEAP_BYTES}")
    refusals = refuse_side_effects(conn)
    stop = _Stop(args.timeout, conn)
    conn.set_progress_handler(stop.check, 10_000)  # SQLite asks every 10,000 VM steps
    try:
        with stop.on_ctrl_c(), stop.watching():
            cursor = db.execute(args.sql, dict(args.param))
            return [d[0] for d in cursor.description or []], _bounded_rows(cursor)
    except _TooLarge as exc:
        print(f"agentledger: query stopped: {exc}", file=sys.stderr)
        return None
    except MemoryError:
        print(f"agentledger: query stopped: it needed more than {QUERY_HEAP_BYTES >> 20} MiB", file=sys.stderr)
        return None
    except sqlite3.Error as exc:
        if "too big" in str(exc):
            print(f"agentledger: query stopped: a value over {QUERY_VALUE_BYTES >> 20} MiB ({exc})", file=sys.stderr)
            return None
        if "out of memory" in str(exc):
            print(f"agentledger: query stopped: it needed more than {QUERY_HEAP_BYTES >> 20} MiB ({exc})",
                  file=sys.stderr)
            return None
        if stop.why:
            print(f"agentledger: query stopped: {stop.why}", file=sys.stderr)
        elif refusals.reason:
            print(f"agentledger: query refused: {refusals.reason}", file=sys.stderr)
        elif "readonly" in str(exc) or "read-only" in str(exc):
            print(f"agentledger: query refused: the ledger is read-only here ({exc})", file=sys.stderr)
        else:
            print(f"agentledger: query failed: {exc}", file=sys.stderr)
        return None
    finally:
        conn.close()


QUERY_HEAP_BYTES = 512 << 20  # the most memory SQLite may take for one `query` (its own process)
QUERY_VALUE_BYTES = 64 << 20  # the longest string or blob a `query` may make
QUERY_RESULT_BYTES = 256 << 20  # the most a `query`'s rows may hold, as fetched


class _TooLarge(Exception):
    pass


def _bounded_rows(cursor) -> list:
    """Every row, fetched a batch at a time and counted (text and blobs by their length),
    until the rows hold more than ``QUERY_RESULT_BYTES``."""
    rows, size = [], 0
    while batch := cursor.fetchmany(1000):
        for row in batch:
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row) + 16
        rows += batch
        if size > QUERY_RESULT_BYTES:
            raise _TooLarge(f"its rows hold more than {QUERY_RESULT_BYTES >> 20} MiB; narrow it (WHERE, LIMIT)")
    return rows


class _Stop:
    """Ends a local query (SQLite's progress handler) past its time limit or on
    Ctrl-C, so that a runaway query cannot hold a read snapshot while the daemon writes.
    A step that runs long between two of the handler's calls (one sort, one function
    call over a large value) is interrupted from a timer thread at the deadline
    (``sqlite3_interrupt``, which SQLite checks inside long operations too)."""

    def __init__(self, timeout: float, conn=None) -> None:
        import time

        self.timeout = timeout
        self.conn = conn
        self.deadline = time.monotonic() + timeout if timeout else None
        self.why = ""

    @contextlib.contextmanager
    def watching(self):
        import threading

        def late() -> None:
            if not self.why:
                self.why = "it ran longer than the time limit (--timeout SECONDS, 0 for none)"
            self.conn.interrupt()

        timer = threading.Timer(self.timeout, late) if self.timeout and self.conn is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            yield
        finally:
            if timer is not None:  # ended, not only told to: a thread left running keeps the exit waiting
                timer.cancel()
                timer.join()

    def check(self) -> int:
        import time

        if not self.why and self.deadline is not None and time.monotonic() > self.deadline:
            self.why = "it ran longer than the time limit (--timeout SECONDS, 0 for none)"
        return 1 if self.why else 0

    @contextlib.contextmanager
    def on_ctrl_c(self):
        """Within the block, Ctrl-C stops the query (through ``check``) instead of being
        held until SQLite returns."""
        def interrupt(_sig, _frame) -> None:
            self.why = "interrupted (Ctrl-C)"
            if self.conn is not None:
                self.conn.interrupt()

        previous = signal.signal(signal.SIGINT, interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def cmd_trials(args: argparse.Namespace) -> int:
    _, conn = read_only(args)
    where, params = [], []
    for col, val in (("eval_name", args.eval_name), ("model", args.model), ("variant", args.variant),
                     ("status", args.status)):
        if val:
            where.append(f"{col} = ?")
            params.append(val)
    if args.run:
        where.append("instr(run_dir, ?) > 0")
        params.append(args.run)
    if args.failed:
        where.append("passed = 0")
    sql = ("SELECT run_dir, eval_name, stimulus, model, variant, trial_index, status, passed, grade_score,"
           " duration_ms, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, tool_calls,"
           " tool_errors, turns, item_id, raw_path, raw_offset, raw_length FROM trials")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY run_dir, eval_name, stimulus, model, trial_index"
    if args.limit:
        sql += f" LIMIT {int(args.limit)}"
    rows = [dict(r) for r in conn.execute(sql, params)]
    conn.close()
    print_rows(args, rows, ["run_dir", "eval_name", "model", "variant", "trial_index", "status", "passed",
                            "grade_score", "duration_ms", "input_tokens", "tool_errors"], "no trials")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    _, conn = read_only(args)
    rows = [dict(r) for r in conn.execute(
        "SELECT r.source, r.run_dir, r.run_id, r.kind, r.experiment, r.variant, r.trials, r.passed, r.errors,"
        " r.complete, round(1.0 * r.passed / nullif(r.trials, 0), 4) AS pass_rate FROM runs r"
        " ORDER BY r.source, r.run_dir")]
    conn.close()
    print_rows(args, rows, ["run_dir", "kind", "variant", "trials", "passed", "errors", "pass_rate", "complete"],
               "no runs")
    return EXIT_OK
