"""Commands for looking at and shipping the ledger: ``ui``, ``report``, ``export``, ``import``."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from .common import (
    add_timeout_flag,
    port,
    EXIT_OK,
    EXIT_USAGE,
    Failure,
    UsageError,
    load_config,
    output_file,
    progress_bar,
    read_only,
)


def add_commands(cmd) -> None:
    p = cmd("ui", "Serve the ledger read-only in Datasette on 127.0.0.1 (needs: pip install 'agentledger[ui]').")
    p.add_argument("--port", type=port, default=8001, help="port (default 8001; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; another than loopback needs --public)")
    p.add_argument("--public", action="store_true",
                   help="allow a --host that is not loopback: anyone who reaches it reads the whole ledger"
                        " (every event, record, transcript fact and quarantine reason), with no login")
    p.set_defaults(func=cmd_ui)

    p = cmd("report", "Write one self-contained HTML report with charts (no network needed to view it).")
    p.add_argument("--output", "-o", type=Path, default=Path("agentledger-report.html"), help="file to write")
    p.add_argument("--since", metavar="DATE", help="only scores computed at or after this ISO-8601 date/time (UTC)")
    p.add_argument("--session", metavar="ID", help="only this agent session's iterations")
    p.add_argument("--central", nargs="?", const="", metavar="URL",
                   help="the team report, from the team ledger (PostgreSQL; default: the one [[ship]] entry)")
    add_timeout_flag(p)
    p.set_defaults(func=cmd_report)

    p = cmd("export", "Write events as JSON Lines (from a seq on), or scores as CSV (--rubric V: one version),"
                      " to stdout or --output.")
    p.add_argument("--format", choices=("jsonl", "csv"), default="jsonl",
                   help="jsonl: events (default); csv: scores, every rubric version")
    p.add_argument("--after", type=int, default=0, metavar="SEQ",
                   help="jsonl: only events with seq greater than SEQ (resume from the last one you saw)")
    p.add_argument("--type", dest="types", action="append", default=[], metavar="TYPE",
                   help="jsonl: only events of this type (repeatable)")
    p.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")
    p.set_defaults(func=cmd_export)

    p = cmd("import", "Append events from an `agentledger export` (JSON Lines) into this ledger, and project them.")
    p.add_argument("file", help="the export file, or - for stdin")
    p.set_defaults(func=cmd_import)


def _out(path: Path | None):
    return open(path, "w", encoding="utf-8", newline="") if path else sys.stdout


def cmd_export(args: argparse.Namespace) -> int:
    from ..store.events import CURRENT
    from ..views import export

    unknown = sorted(set(args.types) - set(CURRENT))
    if unknown:
        raise UsageError(f"unknown event type(s) {', '.join(unknown)} (types: {', '.join(sorted(CURRENT))})")
    if args.output:
        output_file(args.output)
    _, conn = read_only(args)
    out = _out(args.output)
    try:
        if args.format == "csv":
            n = export.write_scores_csv(conn, out, rubric=getattr(args, "rubric", None))  # csv: --rubric filters
        else:
            n = 0
            for line in export.event_lines(conn, args.after, args.types):
                out.write(line + "\n")
                n += 1
    finally:
        if out is not sys.stdout:
            out.close()
        conn.close()
    if args.output:
        print(f"export: {n} {'scores' if args.format == 'csv' else 'events'} → {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from ..store import db
    from ..userfiles import UserFileError, lines, open_lines
    from ..views import export

    cfg = load_config(args)
    src = open_lines(args.file, "import")  # before the ledger is opened: a regular file, or stdin not a device
    conn = db.connect(cfg.store.path, synchronous=cfg.store.synchronous)
    total = 0
    bar, update = progress_bar("import") if src is not sys.stdin else (None, None)
    try:
        if bar:  # a file on a terminal: count its lines first, so the bar has a total
            total = sum(1 for line in lines(src, "import") if line.strip())
            src.seek(0)
        if bar:
            with bar:
                read, new = export.import_lines(conn, lines(src, "import"), progress=update, total=total)
        else:
            read, new = export.import_lines(conn, lines(src, "import"))
    except UserFileError as exc:
        raise Failure(str(exc)) from None
    except export.ImportRefused as exc:
        raise Failure(f"import: {exc}") from None
    except UnicodeDecodeError as exc:
        raise Failure(f"import: not an agentledger event export: the file is not UTF-8 text (byte {exc.start}"
                      " of a line); nothing was imported") from None
    finally:
        if src is not sys.stdin:
            src.close()
        conn.close()
    print(f"import: {read} events read, {new} new, {read - new} already present")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from ..views import report

    since = _since(args.since)
    output_file(args.output)
    if args.central is not None:
        data, where = _team_data(args, since)
    else:
        data, where = _local_data(args, since)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    text = report.render(data, generated_at=now, ledger=where)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.output)
    print(f"report: {len(data.latest)} iterations, {len(data.pass_rates)} eval×model rows → {args.output}")
    return EXIT_OK


def _team_data(args: argparse.Namespace, since: str | None):
    from ..central import read
    from ..central import team_report as team
    from .team import destination

    dest = destination(args, args.central)
    try:
        with read.reading(dest.url, label=dest.label, timeout=args.timeout) as pg:
            return team.gather(pg, since=since, session=args.session), dest.label
    except (read.CentralError, read.QueryError) as exc:
        raise Failure(str(exc)) from None


def _local_data(args: argparse.Namespace, since: str | None):
    from ..views import report

    cfg, conn = read_only(args)
    if args.session and conn.execute("SELECT 1 FROM iterations WHERE session_id = ? LIMIT 1",
                                     (args.session,)).fetchone() is None:
        recent = [r[0] for r in conn.execute(
            "SELECT session_id FROM iterations WHERE session_id <> '' GROUP BY session_id"
            " ORDER BY max(iteration) DESC LIMIT 5")]
        conn.close()
        raise Failure(f"no session {args.session!r} in the ledger"
                      + (f" (the latest: {', '.join(recent)})" if recent else " (it has no sessions)"))
    data = report.gather(conn, since=since, session=args.session)
    conn.close()
    return data, str(cfg.store.path)


def _since(text: str | None) -> str | None:
    """``--since``: a date or an ISO 8601 time, as the report compares it (UTC)."""
    if text is None:
        return None
    from ..analysis.cohorts import SelectorError, checked_when

    try:
        checked_when("since", text)  # the one grammar of a date a command takes
    except SelectorError:
        raise UsageError(f"--since: not a date or time: {text!r} (use YYYY-MM-DD or an ISO 8601 time)") from None
    return text


def cmd_ui(args: argparse.Namespace) -> int:
    from ..service import ui

    if not ui.available():
        print("agentledger ui needs Datasette: pip install 'agentledger[ui]'", file=sys.stderr)
        return EXIT_USAGE
    if not ui.loopback(args.host) and not args.public:
        raise UsageError(f"--host {args.host} would serve the whole ledger (every event, record and quarantine"
                         " reason) to anyone who reaches it, with no login; add --public to mean it, or keep"
                         " the default 127.0.0.1 and use an SSH tunnel")
    path = Path(load_config(args).store.path)
    read_only(args)[1].close()  # as every read command: an older ledger's schema (views) is brought up to date
    # The metadata reaches Datasette through a pipe, not a temp file: the exec below
    # leaves nothing behind to clean, whatever ends Datasette.
    try:
        port = ui.free_port(args.host, args.port)
    except OSError as exc:
        raise Failure(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
                      " (another --port, or 0 for a free one)") from None
    meta_fd = ui.metadata_pipe(ui.metadata_for(path))
    cmd = ui.command(path, Path(f"/dev/fd/{meta_fd}"), args.host, port)
    print(f"agentledger ui: serving {path} read-only on http://{args.host}:{port}/ (Ctrl-C stops)",
          file=sys.stderr)
    if not ui.loopback(args.host):
        print(f"agentledger ui: warning: --public: the whole ledger is readable by anyone who reaches"
              f" {args.host}:{port}, with no login", file=sys.stderr)
    sys.stderr.flush()
    os.execv(cmd[0], cmd)  # Datasette replaces this process: signals and exit status are its own
    return EXIT_OK  # pragma: no cover
