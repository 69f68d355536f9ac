"""The ``agentledger`` command line.

Thin: each command parses flags, calls one ``Ledger`` method, prints. Exit
status 0 on success, 1 on failure, 2 on a usage error. Read commands take
``--json``. Imports stay lazy so that ``agentledger score N`` (the close-task
hook) loads only the stdlib, PyYAML and the scorer.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Sequence

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("ledger and sources")
    S = argparse.SUPPRESS
    g.add_argument("--config", metavar="PATH", default=S,
                   help="config file (default: $AGENTLEDGER_CONFIG, else ./agentledger.toml)")
    g.add_argument("--db", metavar="PATH", default=S, help="ledger SQLite file (overrides [store] path)")
    g.add_argument("--iteration-log", metavar="DIR", default=S,
                   help="an iteration-log directory to use instead of the configured sources")
    g.add_argument("--repo", metavar="DIR", default=S, help="the git work tree of --iteration-log")
    g.add_argument("--trunk", metavar="NAME", default=S, help="trunk branch (default: master)")
    g.add_argument("--rubric", metavar="VERSION", default=S, help="activate this rubric version (it stays active; see README, Rubric versions)")
    g.add_argument("--transcripts", metavar="DIR", action="append", default=S,
                   help="a Claude/Codex transcript directory for the iteration log(s) (repeatable)")
    g.add_argument("--vally", metavar="DIR", action="append", default=S,
                   help="a directory of vally results to use instead of the configured ones (repeatable)")
    g.add_argument("--annotations", metavar="DIR", action="append", default=S,
                   help="a directory of annotated trajectories (*.md) to use instead of the configured ones"
                        " (repeatable)")
    g.add_argument("-q", "--quiet", action="store_true", default=S, help="print errors only")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentledger",
        description="An event-sourced ledger of coding-agent runs that keeps their outcome scores fresh.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"agentledger {__version__}")
    _common(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def cmd(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _common(p)
        return p

    p = cmd("ingest", "Scan the sources once, append new events, score, write sidecars (`run` keeps watching).")
    p.add_argument("--once", action="store_true", help="accepted for older scripts: ingest always scans once")
    p.add_argument("--rescore-all", action="store_true",
                   help="recompute every iteration's inputs, not only those the changes can affect")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = cmd("run", "Run as a service: scan, then watch every source and keep scores fresh (SIGTERM stops).")
    p.add_argument("--log-format", choices=("json", "console"), help="log lines for journald (json) or people")

    p = cmd("score", "Ingest and score one iteration (the close-task hook), print its breakdown.")
    p.add_argument("iteration", type=int, metavar="N")
    p.add_argument("--source", metavar="NAME", help="which configured iteration log (name or path)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = cmd("backfill", "Rescore every iteration under the active rubric (--rubric VERSION activates that one first).")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = cmd("rebuild", "Drop every projection, replay all events, rewrite sidecars that differ.")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = cmd("status", "Counts, active rubric, quarantine, last event, sources.")
    p.add_argument("--json", action="store_true", help="print as JSON")

    p = cmd("quarantine", "List files (and lines) that could not be ingested, with the reason.")
    p.add_argument("--all", action="store_true", help="include entries resolved by a later good version")
    p.add_argument("--json", action="store_true", help="print as JSON")

    p = cmd("trials", "List vally trials (filters combine).")
    p.add_argument("--run", metavar="DIR", help="run directory (relative to its vally source), or a part of it")
    p.add_argument("--eval", metavar="NAME", dest="eval_name", help="eval name")
    p.add_argument("--model", metavar="MODEL")
    p.add_argument("--variant", metavar="NAME")
    p.add_argument("--status", metavar="STATUS", help="success | error | skipped")
    p.add_argument("--failed", action="store_true", help="only trials that did not pass")
    p.add_argument("--limit", type=int, default=200, help="at most this many rows (default 200; 0: all)")
    p.add_argument("--json", action="store_true", help="print as JSON")

    p = cmd("runs", "List vally runs with trial counts, pass counts and completeness.")
    p.add_argument("--json", action="store_true", help="print as JSON")

    from . import cli_trajectories, cli_views

    cli_trajectories.add_commands(cmd)
    cli_views.add_commands(cmd)

    p = cmd("query", "Run one SQL query on a read-only connection to the ledger.")
    p.add_argument("sql")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="rows as a JSON array of objects")
    fmt.add_argument("--csv", action="store_true", help="rows as CSV with a header")
    return parser


# ----------------------------------------------------------------------------- helpers
def _config(args: argparse.Namespace):
    from . import config as C

    cfg = C.load(getattr(args, "config", None))
    return C.with_overrides(
        cfg, db=getattr(args, "db", None), rubric=getattr(args, "rubric", None),
        iteration_log=getattr(args, "iteration_log", None), repo=getattr(args, "repo", None),
        trunk=getattr(args, "trunk", None), vally=getattr(args, "vally", None),
        transcripts=getattr(args, "transcripts", None), annotations=getattr(args, "annotations", None))


NO_SOURCES = ("no source configured: pass --iteration-log DIR --repo DIR, --vally DIR or --annotations DIR, "
              "or add [[iteration_logs]] / [[vally]] / [[annotations]] to the config file")


def _ledger(args: argparse.Namespace, *, need_sources: bool = True):
    from .ledger import Ledger

    cfg = _config(args)
    if need_sources and not cfg.has_sources:
        raise UsageError(NO_SOURCES)
    ledger = Ledger(cfg)
    if not getattr(args, "quiet", False):
        ledger.announce = lambda msg: print(f"agentledger: {msg}", file=sys.stderr, flush=True)
    ledger.register_sources()
    return ledger


def _progress():
    """A rich progress bar on a terminal; nothing elsewhere (logs, CI, hooks)."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("backfill"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   transient=True)
    task = bar.add_task("backfill", total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, update


def _report_dict(report) -> dict:
    return {k: getattr(report, k) for k in ("events", "quarantined", "files_read", "scored", "unchanged",
                                            "sidecars_written", "sessions_written", "errors")}


def _print_report(args: argparse.Namespace, title: str, report, extra: dict | None = None) -> int:
    data = {**_report_dict(report), **(extra or {})}
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    elif not getattr(args, "quiet", False):
        parts = [f"{k.replace('_', ' ')} {v}" for k, v in data.items() if k != "errors" and not isinstance(v, (list, dict))]
        print(f"{title}: " + ", ".join(parts))
    for err in report.errors:
        print(f"agentledger: error: {err}", file=sys.stderr)
    return EXIT_FAIL if report.errors else EXIT_OK


# ----------------------------------------------------------------------------- commands
def cmd_ingest(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    try:
        bar, update = _progress()
        if bar:
            with bar:
                total = ledger.scan_all(rescore_all=args.rescore_all, progress=update)
        else:
            total = ledger.scan_all(rescore_all=args.rescore_all)
    finally:
        ledger.close()
    return _print_report(args, "ingest", total, {"rubric": ledger.rubric.version})


def _pick_source(ledger, name: str | None):
    sources = ledger.cfg.iteration_logs
    if not sources:
        raise UsageError("score needs an iteration log: --iteration-log DIR --repo DIR, or [[iteration_logs]]")
    if name:
        for s in sources:
            if name in (s.name, str(s.path)):
                return s
        raise UsageError(f"no configured iteration log named {name!r}")
    if len(sources) > 1:
        raise UsageError("several iteration logs are configured: pick one with --source NAME "
                         "or --iteration-log DIR --repo DIR")
    return sources[0]


def cmd_score(args: argparse.Namespace) -> int:
    from .ledger import SourceError
    from .output.sidecars import iteration_sidecar_name, session_sidecar_name

    ledger = _ledger(args)
    try:
        src = _pick_source(ledger, args.source)
        n = args.iteration
        report = ledger.ingest(src, iterations=[n])
        ledger.ensure_rubric()
        try:
            report.add(ledger.score(src, [n]))
        except SourceError as exc:
            print(f"agentledger: error: {exc}", file=sys.stderr)
            return EXIT_FAIL
        row = ledger.conn.execute(
            "SELECT s.*, i.session_id FROM score_details s JOIN iterations i ON i.source = s.source"
            " AND i.iteration = s.iteration WHERE s.source = ? AND s.iteration = ? AND s.rubric_version = ?",
            (src.id, n, ledger.rubric.version)).fetchone()
        if row is None:
            q = ledger.conn.execute(
                "SELECT reason FROM quarantine WHERE source = ? AND path = ? AND resolved_seq IS NULL"
                " ORDER BY seq DESC LIMIT 1", (src.id, f"iter-{n}.yaml")).fetchone()
            why = f": quarantined: {q[0]}" if q else ""
            print(f"agentledger: error: iter-{n}.yaml not found in {src.path}{why}", file=sys.stderr)
            return EXIT_FAIL
        session_path = None
        if row["session_id"]:
            srow = ledger.conn.execute(
                "SELECT sidecar FROM sessions WHERE source = ? AND session_id = ? AND rubric_version = ?",
                (src.id, row["session_id"], ledger.rubric.version)).fetchone()
            if srow is not None and srow[0]:
                session_path = str(src.path / session_sidecar_name(row["session_id"]))
        breakdown = json.loads(row["breakdown"])
        value = row["value"]
        result = {
            "iteration": n, "score_value": value, "score_band": row["band"], "scored": bool(row["scored"]),
            "rubric_version": row["rubric_version"],
            "sidecar_path": str(src.path / iteration_sidecar_name(n)),
            "session_id": row["session_id"] or None, "session_sidecar_path": session_path,
            "inputs_hash": row["inputs_hash"], "rescored": report.scored > 0,
            "sidecar_written": report.sidecars_written > 0, "breakdown": breakdown,
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            _print_breakdown(result)
        for err in report.errors:
            print(f"agentledger: error: {err}", file=sys.stderr)
        return EXIT_FAIL if report.errors else EXIT_OK
    finally:
        ledger.close()


def _print_breakdown(r: dict) -> None:
    from .model import decode_float

    value = "unscored" if not r["scored"] else f"{decode_float(r['score_value'] if r['score_value'] is not None else 'NaN'):.4f}"
    print(f"iter-{r['iteration']}: {value} {r['score_band']}  (rubric {r['rubric_version']})")
    print(f"  sidecar: {r['sidecar_path']}" + ("" if r["sidecar_written"] else " (unchanged)"))
    if r["session_sidecar_path"]:
        print(f"  session: {r['session_sidecar_path']}")
    print(f"  {'signal':<20} {'weight':>6} {'score':>6} {'share':>6}  detail")
    for row in r["breakdown"]:
        sub = f"{decode_float(row['sub_score']):.3f}" if row["present"] else "-"
        share = f"{decode_float(row['contribution']):.3f}" if row["present"] else "-"
        detail = row["detail"].replace("\n", " / ")
        print(f"  {row['signal']:<20} {decode_float(row['nominal_weight']):>6g} {sub:>6} {share:>6}  {detail}")


def cmd_backfill(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    try:
        before = ledger.state("active_rubric")
        bar, update = _progress()
        if bar:
            with bar:
                report = ledger.ensure_rubric(progress=update) or ledger.backfill(progress=update)
        else:
            report = ledger.ensure_rubric() or ledger.backfill()
        for src in ledger.cfg.iteration_logs:
            report.add(ledger.sync_sidecars(src))
    finally:
        ledger.close()
    return _print_report(args, "backfill", report, {"from_rubric": before, "rubric": ledger.rubric.version})


def cmd_rebuild(args: argparse.Namespace) -> int:
    from .ledger import Report
    from .scoring import rubric as rubrics
    from .store.projections import rebuild

    if getattr(args, "rubric", None):
        raise UsageError("rebuild replays the ledger under its active rubric; "
                         "to change the rubric use `agentledger backfill --rubric VERSION`")
    ledger = _ledger(args, need_sources=False)
    try:
        replayed = rebuild(ledger.conn)
        # derived state only: the sidecars of the rubric the events made active (never a new activation)
        ledger.rubric = rubrics.load(ledger.state("active_rubric") or ledger.rubric.version)
        report = Report()
        for src in ledger.cfg.iteration_logs:
            report.add(ledger.sync_sidecars(src))
    finally:
        ledger.close()
    return _print_report(args, "rebuild", report, {"events_replayed": replayed})


def _ro(args: argparse.Namespace):
    from .store.db import connect, connect_readonly

    cfg = _config(args)
    if not cfg.store.path.exists():
        connect(cfg.store.path).close()  # an empty, migrated ledger reads as zeros
    conn = connect_readonly(cfg.store.path)
    from .store.migrate import migration_files

    if conn.execute("PRAGMA user_version").fetchone()[0] < len(migration_files()):
        # A ledger written by an older version (its daemon not restarted yet): the new
        # migrations only add tables and views, so bring it up to date before reading.
        try:
            connect(cfg.store.path, create=False).close()
            conn.close()
            conn = connect_readonly(cfg.store.path)
        except (OSError, sqlite3.Error) as exc:  # a read-only copy: read what it has
            print(f"agentledger: warning: ledger schema is older than this version and could not be "
                  f"upgraded ({exc}); newer tables and views are missing", file=sys.stderr)
    return cfg, conn


def cmd_status(args: argparse.Namespace) -> int:
    cfg, conn = _ro(args)

    def one(sql: str, *a):
        row = conn.execute(sql, a).fetchone()
        return row[0] if row else None

    last = conn.execute("SELECT seq, type, recorded_at, source_path FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    data = {
        "store": str(cfg.store.path),
        "active_rubric": one("SELECT value FROM ledger_state WHERE key = 'active_rubric'"),
        "configured_rubric": cfg.scoring.rubric,
        "configured_rubric_seen": one("SELECT value FROM ledger_state WHERE key = 'configured_rubric'"),
        "backfill_in_progress": one("SELECT value FROM ledger_state WHERE key = 'backfill'") is not None,
        "events": one("SELECT count(*) FROM events"),
        "iterations": one("SELECT count(*) FROM iterations"),
        "scores": {r[0]: r[1] for r in conn.execute(
            "SELECT rubric_version, count(*) FROM scores GROUP BY rubric_version ORDER BY rubric_version")},
        "sessions": one("SELECT count(DISTINCT source || char(0) || session_id) FROM sessions"),
        "trials": one("SELECT count(*) FROM trials"),
        "trajectories": one("SELECT count(*) FROM trajectories"),
        "quarantined": one("SELECT count(*) FROM quarantine WHERE resolved_seq IS NULL"),
        "last_event": dict(last) if last else None,
        "sources": [_source_status(conn, dict(r)) for r in conn.execute(
            "SELECT source, kind, root, repo, trunk, seen_at FROM sources ORDER BY kind, source")],
    }
    conn.close()
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(f"ledger        {data['store']}")
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
    return EXIT_OK


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
    _, conn = _ro(args)
    sql = ("SELECT q.id, q.source, q.path, q.kind, q.line, q.col AS column, q.byte_offset, q.reason,"
           " q.content_hash, q.seq, q.resolved_seq, e.recorded_at,"
           " CASE WHEN q.kind IN ('verifier_result', 'review_decision', 'tasks')"
           " THEN coalesce(s.repo, q.source) ELSE q.source END AS base"
           " FROM quarantine q JOIN events e ON e.seq = q.seq LEFT JOIN sources s ON s.source = q.source")
    if not args.all:
        sql += " WHERE q.resolved_seq IS NULL"
    rows = [dict(r) for r in conn.execute(sql + " ORDER BY q.seq")]
    conn.close()
    for r in rows:
        r["full_path"] = os.path.join(r.pop("base"), r["path"])
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("nothing quarantined")
    for r in rows:
        pos = f":{r['line']}" if r["line"] else (f"@{r['byte_offset']}" if r["byte_offset"] is not None else "")
        if r["line"] and r["column"]:
            pos += f":{r['column']}"
        where = r["full_path"]
        state = "  (resolved)" if r["resolved_seq"] else ""
        reason = r["reason"].replace("\n", "\n    ")
        print(f"{where}{pos}{state}\n    {reason}")
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    import sqlite3

    import sqlite_utils

    from .store.db import refuse_side_effects

    _, conn = _ro(args)
    db = sqlite_utils.Database(conn)  # before the authorizer: it sets a PRAGMA of its own
    refusals = refuse_side_effects(conn)
    try:
        cursor = db.execute(args.sql)
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
    except sqlite3.Error as exc:
        if refusals.reason:
            print(f"agentledger: query refused: {refusals.reason}", file=sys.stderr)
        elif "readonly" in str(exc) or "read-only" in str(exc):
            print(f"agentledger: query refused: the ledger is read-only here ({exc})", file=sys.stderr)
        else:
            print(f"agentledger: query failed: {exc}", file=sys.stderr)
        return EXIT_FAIL
    finally:
        conn.close()
    if args.json:
        print(json.dumps([dict(zip(columns, r)) for r in rows], indent=2, default=str))
    elif args.csv:
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        _table([dict(zip(columns, r)) for r in rows], columns)
    return EXIT_OK


def _table(rows: list[dict], columns: list[str]) -> None:
    widths = [max([len(c)] + [len(_cell(r[c])) for r in rows]) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(_cell(r[c]).ljust(w) for c, w in zip(columns, widths)).rstrip())


def cmd_trials(args: argparse.Namespace) -> int:
    _, conn = _ro(args)
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
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no trials")
    else:
        _table(rows, ["run_dir", "eval_name", "model", "variant", "trial_index", "status", "passed",
                      "grade_score", "duration_ms", "input_tokens", "tool_errors"])
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    _, conn = _ro(args)
    rows = [dict(r) for r in conn.execute(
        "SELECT r.source, r.run_dir, r.run_id, r.kind, r.experiment, r.variant, r.trials, r.passed, r.errors,"
        " r.complete, round(1.0 * r.passed / nullif(r.trials, 0), 4) AS pass_rate FROM runs r"
        " ORDER BY r.source, r.run_dir")]
    conn.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no runs")
    else:
        _table(rows, ["run_dir", "kind", "variant", "trials", "passed", "errors", "pass_rate", "complete"])
    return EXIT_OK


def _cell(v) -> str:
    return "" if v is None else str(v).replace("\n", "\\n")


def cmd_run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .service import logs
    from .service.daemon import Daemon

    def load():
        cfg = _config(args)
        if not cfg.has_sources:
            raise UsageError(NO_SOURCES)
        if args.log_format:
            cfg = replace(cfg, daemon=replace(cfg.daemon, log_format=args.log_format))
        return cfg

    cfg = load()
    logs.setup(cfg.daemon.log_format, "error" if getattr(args, "quiet", False) else "info")
    return Daemon(load).run()


COMMANDS = {
    "ingest": cmd_ingest, "run": cmd_run, "score": cmd_score, "backfill": cmd_backfill, "rebuild": cmd_rebuild,
    "status": cmd_status, "quarantine": cmd_quarantine, "query": cmd_query,
    "trials": cmd_trials, "runs": cmd_runs,
    "trajectories": lambda a: _trajectories("cmd_trajectories", a),
    "trajectory": lambda a: _trajectories("cmd_trajectory", a),
    "lint": lambda a: _trajectories("cmd_lint", a),
    "ui": lambda a: _views("cmd_ui", a),
    "report": lambda a: _views("cmd_report", a),
    "export": lambda a: _views("cmd_export", a),
    "import": lambda a: _views("cmd_import", a),
}


def _trajectories(name: str, args: argparse.Namespace) -> int:
    from . import cli_trajectories

    return getattr(cli_trajectories, name)(args)


def _views(name: str, args: argparse.Namespace) -> int:
    from . import cli_views

    return getattr(cli_views, name)(args)


def main(argv: Sequence[str] | None = None) -> int:
    import logging

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    logging.basicConfig(level=logging.ERROR if getattr(args, "quiet", False) else logging.WARNING,
                        format="agentledger: %(levelname)s: %(message)s", stream=sys.stderr)
    from .config import ConfigError
    from .scoring.rubric import UnknownRubric
    from .store.db import StoreError

    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        parser.exit(EXIT_USAGE, f"agentledger {args.command}: error: {exc}\n")
    except (ConfigError, UnknownRubric) as exc:
        print(f"agentledger: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"agentledger: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
