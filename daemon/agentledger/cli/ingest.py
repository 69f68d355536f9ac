"""Commands that take data in and keep scores fresh: ``ingest``, ``run``, ``score N``
(the close-task hook), ``backfill``, ``rebuild``."""

from __future__ import annotations

import argparse
import json
import sys

from .common import (
    EXIT_FAIL,
    EXIT_OK,
    NO_SOURCES,
    UsageError,
    empty_source_warnings,
    iteration_number,
    open_ledger,
    print_outcome,
    progress_bar,
    sourced_config,
    outcome_failures,
)


def add_commands(cmd) -> None:
    p = cmd("ingest", "Scan the sources once, append new events, score, write sidecars (`run` keeps watching).")
    p.add_argument("--once", action="store_true", help="accepted for older scripts: ingest always scans once")
    p.add_argument("--rescore-all", action="store_true",
                   help="recompute every iteration's inputs, not only those the changes can affect")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_ingest)

    p = cmd("run", "Run as a service: scan, then watch every source and keep scores fresh (SIGTERM stops).")
    p.add_argument("--log-format", choices=("auto", "json", "console"),
                   help="json lines for journald, console lines for people; auto (default): json unless stdout "
                        "is a terminal outside journald")
    p.set_defaults(func=cmd_run)

    p = cmd("score", "Ingest and score one iteration (the close-task hook), print its breakdown.")
    p.add_argument("iteration", type=iteration_number, metavar="N")
    p.add_argument("--source", metavar="NAME", help="which configured iteration log (name or path)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--in-process", action="store_true",
                   help="do the work in this process even when `agentledger run` serves this ledger"
                        " (by default the running service answers, the same way, faster)")
    p.set_defaults(func=cmd_score)

    p = cmd("backfill", "Rescore every iteration under the active rubric (--rubric VERSION activates that one first).")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_backfill)

    p = cmd("rebuild", "Drop every projection, replay all events, rewrite sidecars that differ.")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_rebuild)


def cmd_ingest(args: argparse.Namespace) -> int:
    cfg = sourced_config(args)
    early = _workers_for_a_new_ledger(cfg)
    try:
        ledger = open_ledger(args, cfg=cfg)
    except BaseException:
        if early:
            from ..process.parallel import shutdown

            shutdown()
        raise
    for warning in empty_source_warnings(ledger.cfg):
        print(f"agentledger: warning: {warning}", file=sys.stderr)
    try:
        bar, update = progress_bar()
        if bar:
            with bar:
                total = ledger.scan_all(rescore_all=args.rescore_all, progress=update)
        else:
            total = ledger.scan_all(rescore_all=args.rescore_all)
    finally:
        ledger.close()
    return print_outcome(args, "ingest", total, {"rubric": ledger.rubric.version})


def _workers_for_a_new_ledger(cfg) -> bool:
    """Start the worker pool now, on a thread, when this ingest will create its ledger
    and read a log of at least the pool's threshold of files: the workers are forked
    and have imported the parser while this process creates the ledger's schema and
    lists the directory (~0.2 s of a cold ingest of 10,000 iterations in which one core
    had nothing to do). Whether it started the pool."""
    import itertools
    import os

    from ..process import parallel

    if os.path.lexists(cfg.store.path) or parallel.workers() < 2:
        return False
    from .. import ledger  # noqa: F401  (it names the modules the workers preload)
    from ..sources.iterlogs.files import classify

    need = parallel.min_items()
    for src in cfg.iteration_logs:
        try:
            with os.scandir(src.path) as it:
                n = sum(1 for _ in itertools.islice(filter(None, map(classify, (e.name for e in it))), need))
        except OSError:
            continue  # the scan says why
        if n >= need:
            return parallel.prestart(n)
    return False


def _pick_source(cfg, name: str | None):
    sources = cfg.iteration_logs
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
    as_json, quiet = bool(args.json), bool(getattr(args, "quiet", False))
    cfg = sourced_config(args)
    from ..service import hook

    if hook.SERVING is not None:  # answering for the service (cli/served.py): only what it serves
        if args.in_process or not cfg.has_sources or \
                hook.fingerprint(cfg, _pick_source(cfg, args.source)) not in hook.SERVING:
            raise hook.NotServed
    elif not args.in_process and cfg.has_sources:
        answer = hook.ask(cfg.store.path, args.argv)
        if answer is not None:  # the running service did it, as this process would have
            return _said(*answer)
    from . import setup_logging

    setup_logging(args)
    ledger = open_ledger(args, cfg=cfg)
    try:
        return _said(*score_result(ledger, _pick_source(ledger.cfg, args.source), args.iteration, as_json, quiet))
    finally:
        ledger.close()


def _said(code: int, out: str, err: str) -> int:
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def score_result(ledger, src, n: int, as_json: bool, quiet: bool) -> tuple[int, str, str]:
    """What ``agentledger score N`` does and says: (exit code, stdout, stderr). One function
    for the hook's own process, which is also what answers it for the service (``served.py``)."""
    from ..ledger import SourceError
    from ..output.sidecars import iteration_sidecar_name, session_sidecar_name

    out, err = [], []
    ledger.announce = (lambda msg: None) if quiet else (lambda msg: err.append(f"agentledger: {msg}\n"))
    report = ledger.ingest(src, iterations=[n])
    ledger.ensure_rubric()
    try:
        report.add(ledger.score(src, [n]))
        report.add(ledger.detect())
    except SourceError as exc:
        err.append(f"agentledger: error: {exc}\n")
        return EXIT_FAIL, "", "".join(err)
    row = ledger.conn.execute(
        "SELECT s.*, i.session_id FROM score_details s JOIN iterations i ON i.source = s.source"
        " AND i.iteration = s.iteration WHERE s.source = ? AND s.iteration = ? AND s.rubric_version = ?",
        (src.id, n, ledger.rubric.version)).fetchone()
    if row is None:
        q = ledger.conn.execute(
            "SELECT reason FROM quarantine WHERE source = ? AND path = ? AND resolved_seq IS NULL"
            " ORDER BY seq DESC LIMIT 1", (src.id, f"iter-{n}.yaml")).fetchone()
        why = f": quarantined: {q[0]}" if q else ""
        err.append(f"agentledger: error: iter-{n}.yaml not found in {src.path}{why}\n")
        return EXIT_FAIL, "", "".join(err)
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
        "sidecar_not_written": _not_written(ledger, report, src.path / iteration_sidecar_name(n)),
    }
    if as_json:
        out.append(json.dumps(result, indent=2))
    elif not quiet:
        _print_breakdown(result, lambda line: out.append(line + "\n"))
    failures = outcome_failures(report)
    err += [f"agentledger: error: {e}\n" for e in failures]
    return (EXIT_FAIL if failures else EXIT_OK), "".join(out), "".join(err)


def _not_written(ledger, report, path) -> str | None:
    """Why the sidecar at ``path`` is not the ledger's (None: it is), new or known."""
    if str(path) in report.unwritten:
        return report.unwritten[str(path)]
    row = ledger.conn.execute("SELECT reason FROM sidecar_problems WHERE path = ?", (str(path),)).fetchone()
    return row[0] if row else None


def _print_breakdown(r: dict, say) -> None:
    """The breakdown for people, a line at a time to ``say``."""
    from ..jsonnum import decode_float

    value = "unscored" if not r["scored"] else f"{decode_float(r['score_value'] if r['score_value'] is not None else 'NaN'):.4f}"
    say(f"iter-{r['iteration']}: {value} {r['score_band']}  (rubric {r['rubric_version']})")
    state = ("" if r["sidecar_written"] else " (NOT WRITTEN: see below)" if r.get("sidecar_not_written")
             else " (unchanged)")
    say(f"  sidecar: {r['sidecar_path']}{state}")
    if r["session_sidecar_path"]:
        say(f"  session: {r['session_sidecar_path']}")
    say(f"  {'signal':<20} {'weight':>6} {'score':>6} {'share':>6}  detail")
    for row in r["breakdown"]:
        sub = f"{decode_float(row['sub_score']):.3f}" if row["present"] else "-"
        share = f"{decode_float(row['contribution']):.3f}" if row["present"] else "-"
        detail = row["detail"].replace("\n", " / ")
        say(f"  {row['signal']:<20} {decode_float(row['nominal_weight']):>6g} {sub:>6} {share:>6}  {detail}")


def cmd_backfill(args: argparse.Namespace) -> int:
    ledger = open_ledger(args)
    try:
        before = ledger.state("active_rubric")
        bar, update = progress_bar("backfill")
        if bar:
            with bar:
                report = ledger.ensure_rubric(progress=update) or ledger.backfill(progress=update)
        else:
            report = ledger.ensure_rubric() or ledger.backfill()  # either ends with every sidecar in line
    finally:
        ledger.close()
    return print_outcome(args, "backfill", report, {"from_rubric": before, "rubric": ledger.rubric.version})


def cmd_rebuild(args: argparse.Namespace) -> int:
    from ..ledger import Outcome
    from ..scoring import rubric as rubrics
    from ..store.projections import rebuild

    if getattr(args, "rubric", None):
        raise UsageError("rebuild replays the ledger under its active rubric; "
                         "to change the rubric use `agentledger backfill --rubric VERSION`")
    ledger = open_ledger(args, need_sources=False)
    try:
        bar, update = progress_bar("rebuild")
        if bar:
            with bar:
                replayed = rebuild(ledger.conn, progress=update)
        else:
            replayed = rebuild(ledger.conn)
        # derived state only: the sidecars of the rubric the events made active (never a new activation)
        ledger.rubric = rubrics.load(ledger.state("active_rubric") or ledger.rubric.version)
        report = Outcome()
        for src in ledger.cfg.iteration_logs:
            report.add(ledger.sync_sidecars(src))
        if not ledger.cfg.iteration_logs and not getattr(args, "quiet", False):
            print("rebuild: no iteration log configured, so no sidecar to write: the projections were rebuilt"
                  " (pass --iteration-log DIR --repo DIR, or configure [[iteration_logs]], to write sidecars)",
                  file=sys.stderr)
    finally:
        ledger.close()
    return print_outcome(args, "rebuild", report, {"events_replayed": replayed})


def cmd_run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..service import logs
    from ..service.daemon import Daemon

    def load():
        cfg = sourced_config(args)
        if not cfg.has_sources:
            raise UsageError(NO_SOURCES)
        if args.log_format:
            cfg = replace(cfg, daemon=replace(cfg.daemon, log_format=args.log_format))
        return cfg

    cfg = load()
    logs.setup(cfg.daemon.log_format, "error" if getattr(args, "quiet", False) else "info")
    return Daemon(load, serve_hook=True).run()
