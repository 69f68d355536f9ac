"""What every command shares: the common flags, loading the configuration, opening
the ledger (to write, or read-only), printing reports and tables, exit codes.

Stdlib only at import: ``agentledger score N`` (the close-task hook) goes through here."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def add_common_flags(p: argparse.ArgumentParser) -> None:
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


def load_config(args: argparse.Namespace):
    from .. import config as C

    cfg = C.load(getattr(args, "config", None))
    return C.with_overrides(
        cfg, db=getattr(args, "db", None), rubric=getattr(args, "rubric", None),
        iteration_log=getattr(args, "iteration_log", None), repo=getattr(args, "repo", None),
        trunk=getattr(args, "trunk", None), vally=getattr(args, "vally", None),
        transcripts=getattr(args, "transcripts", None), annotations=getattr(args, "annotations", None))


NO_SOURCES = ("no source configured: pass --iteration-log DIR --repo DIR, --vally DIR or --annotations DIR, "
              "or add [[iteration_logs]] / [[vally]] / [[annotations]] to the config file")


def open_ledger(args: argparse.Namespace, *, need_sources: bool = True):
    from ..ledger import Ledger

    cfg = load_config(args)
    if need_sources and not cfg.has_sources:
        raise UsageError(NO_SOURCES)
    ledger = Ledger(cfg)
    if not getattr(args, "quiet", False):
        ledger.announce = lambda msg: print(f"agentledger: {msg}", file=sys.stderr, flush=True)
    ledger.register_sources()
    return ledger


def progress_bar():
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


def report_dict(report) -> dict:
    return {k: getattr(report, k) for k in ("events", "quarantined", "files_read", "scored", "unchanged",
                                            "sidecars_written", "sessions_written", "errors")}


def print_report(args: argparse.Namespace, title: str, report, extra: dict | None = None) -> int:
    data = {**report_dict(report), **(extra or {})}
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    elif not getattr(args, "quiet", False):
        parts = [f"{k.replace('_', ' ')} {v}" for k, v in data.items() if k != "errors" and not isinstance(v, (list, dict))]
        print(f"{title}: " + ", ".join(parts))
    for err in report.errors:
        print(f"agentledger: error: {err}", file=sys.stderr)
    return EXIT_FAIL if report.errors else EXIT_OK


def read_only(args: argparse.Namespace):
    from ..store.db import connect, connect_readonly

    cfg = load_config(args)
    if not cfg.store.path.exists():
        connect(cfg.store.path).close()  # an empty, migrated ledger reads as zeros
    conn = connect_readonly(cfg.store.path)
    from ..store.migrate import migration_files

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


def table(rows: list[dict], columns: list[str]) -> None:
    widths = [max([len(c)] + [len(cell(r[c])) for r in rows]) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(cell(r[c]).ljust(w) for c, w in zip(columns, widths)).rstrip())


def cell(v) -> str:
    return "" if v is None else str(v).replace("\n", "\\n")
