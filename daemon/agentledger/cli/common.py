"""What every command shares: the common flags, loading the configuration, opening
the ledger (to write, or read-only), printing reports and tables, exit codes.

Stdlib only at import: ``agentledger score N`` (the close-task hook) goes through here."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys

from ..errors import AgentledgerError, UsageError
from .. import names
from ..terminal import shown

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

Failure = AgentledgerError  # the command cannot do what was asked (nothing there, cannot read or write)
__all__ = ["Failure", "UsageError"]


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


def _ranged(parse, what: str, lo, hi, words: str):
    """An argparse type: ``parse(text)`` from ``lo`` to ``hi``, refused in words otherwise."""
    def check(text: str):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r} ({words})") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"not {what}: {text} ({words})")
        return value

    check.__name__ = what.split()[-1]
    return check


seconds = _ranged(float, "a number of seconds", 0, 10**7, "0 to 10000000")
port = _ranged(int, "a port", 0, 65535, "0 to 65535; 0 picks a free one")
def _grammar_number(text: str) -> int:
    n = names.iteration_number(text)
    if n is None:
        raise ValueError(text)
    return n


iteration_number = _ranged(_grammar_number, "an iteration number", 0, 2**63 - 1,
                           "ASCII digits with no leading zero, from 0 to 2**63 - 1, as in iter-N.yaml")


def add_timeout_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="stop a statement that runs longer than this (default 60; 0: no limit); Ctrl-C stops it too")


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


def sourced_config(args: argparse.Namespace):
    """The configuration with its sources: those configured or on the command line, else
    the dot-agents repository around the current directory (which may find none)."""
    cfg = load_config(args)
    return cfg if cfg.has_sources else with_discovered_log(cfg)


def open_ledger(args: argparse.Namespace, *, need_sources: bool = True, cfg=None):
    """``cfg``: the configuration the caller loaded already (``sourced_config``)."""
    from ..ledger import Ledger

    if cfg is None:
        cfg = sourced_config(args) if need_sources else load_config(args)
    if need_sources and not cfg.has_sources:
        raise UsageError(NO_SOURCES)
    check_flag_paths(args)
    ledger = Ledger(cfg)
    if not getattr(args, "quiet", False):
        ledger.announce = lambda msg: print(f"agentledger: {msg}", file=sys.stderr, flush=True)
    ledger.register_sources()
    return ledger


def with_discovered_log(cfg):
    """No source configured: the dot-agents repository around the current directory."""
    from dataclasses import replace

    from ..config import find_dot_agents_log, make_source

    found = find_dot_agents_log()
    if found is None:
        return cfg
    return replace(cfg, iteration_logs=(make_source(found[0], found[1]),))


def check_flag_paths(args: argparse.Namespace) -> None:
    """A directory named on the command line must exist: a one-off command on a typo'd
    path would otherwise report nothing found and exit 0 (and remember the source)."""
    import os

    named = [("--iteration-log", getattr(args, "iteration_log", None)), ("--repo", getattr(args, "repo", None))]
    for flag in ("transcripts", "vally", "annotations"):
        named += [(f"--{flag}", p.removeprefix("vally:")) for p in getattr(args, flag, None) or ()]
    for flag, path in named:
        if path and not os.path.isdir(os.path.expanduser(path)):
            raise UsageError(f"{flag} {path}: no such directory")


def empty_source_warnings(cfg) -> list[str]:
    """What each existing source directory was expected to hold, where it holds none of it."""
    import fnmatch
    import os
    from pathlib import Path

    def has(path: Path, pattern: str, recursive: bool = False) -> bool:
        try:
            if recursive:
                return next(iter(path.rglob(pattern)), None) is not None
            # stops at the first match (Path.glob lists the whole directory first: 13 ms
            # of every re-ingest of a 10,000-iteration log)
            with os.scandir(path) as it:
                return any(fnmatch.fnmatchcase(e.name, pattern) for e in it)
        except OSError:
            return True  # unreadable: the scan reports it

    out = []
    for s in cfg.iteration_logs:
        if s.path.is_dir() and not (has(s.path, "iter-*.yaml") or (s.path / "historical.yaml").exists()):
            out.append(f"{s.path}: no iter-N.yaml or historical.yaml here (an iteration log is "
                       ".agents/active/iteration-log in a dot-agents repository)")
        out += [f"{d}: no *.jsonl transcripts here" for d in s.transcripts if d.is_dir() and not has(d, "*.jsonl")]
    out += [f"{v.path}: no results.jsonl or run-summary.jsonl under it" for v in cfg.vally if v.path.is_dir()
            and not (has(v.path, "results.jsonl", True) or has(v.path, "run-summary.jsonl", True))]
    out += [f"{a.path}: no *.md annotated trajectories under it" for a in cfg.annotations
            if a.path.is_dir() and not has(a.path, "*.md", True)]
    return out


def progress_bar(label: str = "scoring"):
    """A rich progress bar on a terminal; nothing elsewhere (logs, CI, hooks). It stays
    hidden until the work has a count (no "0/?" frames while files are read). The
    update takes (done, total) of ``label``'s work, or (done, total, what) for bytes of
    another step (a large catch-up: ``reading results.jsonl``), shown in MiB."""
    if not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[counts]}"),
                   TimeRemainingColumn(), transient=True, console=Console(stderr=True))  # stdout: the output
    task = bar.add_task(label, total=None, visible=False, counts="")

    def update(done: int, total: int, what: str | None = None) -> None:
        counts = f"{done / 2**20:,.1f}/{total / 2**20:,.1f} MiB" if what else f"{done:,}/{total:,}"
        bar.update(task, completed=done, total=total, visible=total > 0, description=what or label, counts=counts)

    return bar, update


def outcome_dict(report) -> dict:
    out = {k: getattr(report, k) for k in ("events", "quarantined", "files_read", "scored", "unchanged",
                                           "sidecars_written", "sessions_written", "detections", "errors")}
    out["sidecars_not_written"] = {**report.unwritten}
    return out


def outcome_failures(report) -> list[str]:
    """The lines a command says on stderr for what it could not do (exit 1 when any)."""
    lines = list(report.errors)
    lines += [f"cannot write {path}: {why} (the rest was done; `agentledger quarantine` lists it)"
              for path, why in report.unwritten.items()]
    still = len(report.still_unwritten - report.unwritten.keys())
    if still:
        lines.append(f"{still} sidecar(s) still cannot be written (`agentledger quarantine` lists"
                     " them)")
    return lines


def print_outcome(args: argparse.Namespace, title: str, report, extra: dict | None = None) -> int:
    data = {**outcome_dict(report), **(extra or {})}
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    elif not getattr(args, "quiet", False):
        parts = [f"{k.replace('_', ' ')} {v}" for k, v in data.items() if k != "errors" and not isinstance(v, (list, dict))]
        print(f"{title}: " + ", ".join(parts))
    failures = outcome_failures(report)
    for err in failures:
        print(f"agentledger: error: {err}", file=sys.stderr)
    return EXIT_FAIL if failures else EXIT_OK


def count(text: str) -> int:
    """An argparse type: a whole number ≥ 0 (``--limit``; 0 means all)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (all) or more, not {value}")
    return value


def output_file(path) -> None:
    """Fail before any work when ``path`` (an ``--output``) cannot be created."""
    from pathlib import Path

    parent = Path(path).parent
    if not parent.is_dir():
        raise Failure(f"cannot write {path}: no directory {parent}")


def read_only(args: argparse.Namespace):
    from ..store.db import connect, connect_readonly

    cfg = load_config(args)
    if not cfg.store.path.is_file():  # a read command never creates a ledger (or its directory)
        raise Failure(f"no ledger at {cfg.store.path}; run `agentledger ingest` first "
                      "(or point --db / [store] path at one)")
    conn = connect_readonly(cfg.store.path)
    from ..store.migrate import migration_files

    if conn.execute("PRAGMA user_version").fetchone()[0] < len(migration_files()):
        # A ledger written by an older version (its daemon not restarted yet): the new
        # migrations only add tables, indexes and views, so bring it up to date before reading.
        try:
            connect(cfg.store.path, create=False).close()
            conn.close()
            conn = connect_readonly(cfg.store.path)
        except (OSError, sqlite3.Error) as exc:  # a read-only copy: read what it has
            print(f"agentledger: warning: ledger schema is older than this version and could not be "
                  f"upgraded ({exc}); newer tables and views are missing", file=sys.stderr)
    return cfg, conn


def print_rows(args: argparse.Namespace, rows: list[dict], columns: list[str], empty: str) -> None:
    """A read command's rows: JSON with ``--json``, else a table of ``columns`` (or ``empty``)."""
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(empty)
    else:
        table(rows, columns)


def table(rows: list[dict], columns: list[str]) -> None:
    """Rows as a text table; every cell and column name from the data through ``shown``."""
    columns_shown = [shown(c) for c in columns]
    widths = [max([len(c)] + [len(cell(r[k])) for r in rows]) for c, k in zip(columns_shown, columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns_shown, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(cell(r[c]).ljust(w) for c, w in zip(columns, widths)).rstrip())


def cell(v) -> str:
    return "" if v is None else shown(v)
