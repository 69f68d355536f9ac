"""Commands that answer "did it get better?": ``compare``, ``experiment``, ``cost``,
``detections``."""

from __future__ import annotations

import argparse
import sys

from ..store.db import read_state
from .common import EXIT_FAIL, EXIT_OK, Failure, UsageError, count, read_only, table


def add_commands(cmd) -> None:
    p = cmd("compare", "Compare two cohorts (A, the baseline, and B) metric by metric: the difference with a 95 %"
                       " interval, a p-value from the right test, and a verdict (improved / regressed / no"
                       " detectable change).")
    p.add_argument("kind", nargs="?", choices=("iterations", "trials", "annotations"), default="iterations",
                   help="iterations (scores and signals; default), trials (vally: pass rates, tokens, …) or"
                        " annotations (annotated trajectories: scores, failure modes)")
    p.add_argument("--a", dest="a", action="append", default=[], metavar="KEY=VALUE",
                   help="the baseline cohort's selector (repeatable; e.g. rubric=2.1.0, since=2026-06-01,"
                        " variant=baseline); none: everything")
    p.add_argument("--b", dest="b", action="append", default=[], metavar="KEY=VALUE",
                   help="the cohort compared with it (same keys)")
    p.add_argument("--metric", action="append", default=[], help="only this metric (repeatable)")
    pairing = p.add_mutually_exclusive_group()
    pairing.add_argument("--paired", dest="paired", action="store_true", default=None,
                         help="compare unit by unit (default: when most units are in both cohorts)")
    pairing.add_argument("--unpaired", dest="paired", action="store_false", help="treat the cohorts as independent")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level after adjustment (default 0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0: same data, same answer)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="text (default), markdown (a pull-request comment) or json")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when any metric regressed (for a CI gate)")
    p.set_defaults(func=cmd_compare)

    p = cmd("cost", "What the vally trials or the iterations cost, from their token counts and a price database"
                    " (genai-prices, or your [cost] prices file): trials by day, variant, model, eval, run or trial;"
                    " iterations by day, iteration, session, model or source.")
    p.add_argument("kind", nargs="?", choices=("trials", "iterations"), default="trials",
                   help="trials (vally; default) or iterations (their transcript turns, else the record's"
                        " session_tokens)")
    p.add_argument("--by", choices=("day", "variant", "model", "eval", "run", "trial", "iteration", "session",
                                    "source"), default="day")
    p.add_argument("--run", metavar="RUN_ID", help="only this run's trials")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)

    p = cmd("experiment", "A vally experiment run by variant and stimulus: vally's report.md figures, pass@k,"
                          " flaky stimuli, each grader's pass rate, and each variant against the baseline.")
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the newest experiment run)")
    p.add_argument("--experiment", metavar="NAME", help="the newest run of this experiment")
    p.add_argument("--baseline", metavar="VARIANT", help="the variant the others are compared with"
                                                         " (default: 'baseline' if there is one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the comparisons' resampling (default 0)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.set_defaults(func=cmd_experiment)

    p = cmd("detections", "The regressions and improvements the ledger noticed while they happened (a sustained"
                          " shift of a score, signal or pass-rate stream), newest first: where each began, its size,"
                          " the signals that moved and what changed at that point.")
    p.add_argument("--kind", choices=("regression", "improvement"), help="only these")
    p.add_argument("--limit", type=count, default=20, help="how many (default 20; 0: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_detections)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..analysis import cohorts, render
    from ..analysis.compare import compare

    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: give a level between 0 and 1, e.g. 0.05")
    try:
        a, b = cohorts.parse(args.kind, args.a), cohorts.parse(args.kind, args.b)
    except cohorts.SelectorError as exc:
        raise UsageError(str(exc)) from None
    if a == b:
        raise UsageError("--a and --b select the same cohort; give B a different selector, e.g. --b rubric=3.0.0")
    cfg, conn = read_only(args)
    try:
        only = (_git_units(cfg, conn, a.get("git")), _git_units(cfg, conn, b.get("git")))
        priced = args.kind != "annotations" and (not args.metric or "cost_usd" in args.metric)
        result = compare(conn, args.kind, a, b, active=read_state(conn, "active_rubric"), metrics=args.metric or None,
                         paired=args.paired, alpha=args.alpha, seed=args.seed, only=only,
                         prices=_prices(cfg) if priced else None,  # pricing every unit only when its cost is asked for
                         transcripts=_transcripts(cfg))
    except cohorts.SelectorError as exc:
        raise UsageError(str(exc)) from None
    finally:
        conn.close()
    fmt = "json" if args.json else args.format
    print(render.as_json(result) if fmt == "json" else render.markdown(result) if fmt == "markdown"
          else render.text(result))
    if args.fail_on_regression and result.regressed:
        names = ", ".join(r.label for r in result.regressed)
        print(f"agentledger compare: regressed: {names}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def cmd_cost(args: argparse.Namespace) -> int:
    import json

    from ..analysis.cost import GROUPS, IGROUPS, iteration_costs, trial_costs

    unit = args.kind.rstrip("s")
    if args.by not in (IGROUPS if args.kind == "iterations" else GROUPS):
        raise UsageError(f"--by {args.by} does not group {args.kind}; one of:"
                         f" {', '.join(IGROUPS if args.kind == 'iterations' else GROUPS)}")
    if args.run and args.kind == "iterations":
        raise UsageError("--run selects vally trials; iterations are grouped with --by")
    cfg, conn = read_only(args)
    try:
        if args.kind == "iterations":
            lines = iteration_costs(conn, _prices(cfg), args.by, read_state(conn, "active_rubric") or "",
                                    _transcripts(cfg))
        else:
            lines = trial_costs(conn, _prices(cfg), args.by, args.run)
    finally:
        conn.close()
    if args.json:
        print(json.dumps([{"group": x.group, args.kind: x.units, "priced": x.priced, "unpriced": x.unpriced,
                           "usd": round(x.usd, 6) if x.priced else None, "input": x.input, "output": x.output,
                           "cache_read": x.cache_read, "cache_write": x.cache_write} for x in lines], indent=2))
        return EXIT_OK
    if not lines:
        print(f"no {args.kind}" + (f" in run {args.run}" if args.run else "")
              + (" (ingest vally results with --vally DIR)" if args.kind == "trials" else " scored yet"))
        return EXIT_OK
    headers = [args.by, args.kind, "cost", f"per priced {unit}", "unpriced", "input tokens", "output tokens",
               "cache read", "cache write"]
    table([dict(zip(headers, (x.group, f"{x.units:,}", f"${x.usd:,.4f}" if x.priced else "unpriced",
                              f"${x.usd / x.priced:,.4f}" if x.priced else "–", f"{x.unpriced:,}", f"{x.input:,}",
                              f"{x.output:,}", f"{x.cache_read:,}", f"{x.cache_write:,}"))) for x in lines], headers)
    priced = sum(x.usd for x in lines)
    unpriced = sum(x.unpriced for x in lines)
    print(f"\ntotal ${priced:,.4f}" + (f" and {unpriced:,} unpriced {unit}(s): no token counts, or a model with"
                                       " no price (add it to your [cost] prices file)" if unpriced else ""))
    return EXIT_OK


def cmd_detections(args: argparse.Namespace) -> int:
    import json

    from ..analysis import detections

    _, conn = read_only(args)
    try:
        rows = detections.latest(conn, args.limit, kind=args.kind)
    finally:
        conn.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no regressions or improvements noticed" + (f" of kind {args.kind}" if args.kind else "")
              + " (each score, signal and pass-rate stream is watched from its 100th point on)")
    for d in [] if args.json else rows:
        print(f"#{d['seq']} {d['recorded_at'][:19]}  {detections.sentence(d)}")
    return EXIT_OK


def _transcripts(cfg) -> dict[str, tuple[str, ...]]:
    """Each iteration log's transcript directories (where its iterations' tokens are)."""
    return {s.id: tuple(str(d) for d in (*s.transcripts, *s.vally_transcripts)) for s in cfg.iteration_logs}


def _prices(cfg):
    from ..analysis.cost import Prices, PricesError

    try:
        return Prices.load(cfg.cost.prices)
    except PricesError as exc:
        raise UsageError(str(exc)) from None


def _git_units(cfg, conn, spec: str | None) -> set[tuple] | None:
    """The (source, iteration) units whose commit ``git rev-list SPEC`` lists, in each
    configured iteration log's repository."""
    if spec is None:
        return None
    from ..sources.git import GitError, GitRepo

    if not cfg.iteration_logs:
        raise UsageError(f"git={spec} needs the iteration log's repository: pass --iteration-log DIR --repo DIR"
                         " or configure [[iteration_logs]]")
    units: set[tuple] = set()
    for src in cfg.iteration_logs:
        repo = GitRepo(str(src.repo), src.trunk)
        try:
            shas = repo.commits_in(spec)
            rows = conn.execute("SELECT iteration, commit_ref FROM iterations WHERE source = ?", (src.id,)).fetchall()
            resolved = repo.resolve([r[1] for r in rows])
        except GitError as exc:
            raise UsageError(f"git={spec}: {exc}") from None
        finally:
            repo.close()
        units |= {(src.id, it) for it, commit in rows if resolved[commit].sha in shas}
    return units


def cmd_experiment(args: argparse.Namespace) -> int:
    from ..analysis import experiments, render

    cfg, conn = read_only(args)
    try:
        run = args.run
        if run is None:
            found = experiments.latest_run(conn, args.experiment)
            if found is None:
                what = f"experiment {args.experiment!r}" if args.experiment else "vally experiment"
                raise Failure(f"no {what} run in this ledger (ingest vally results with --vally DIR)")
            run = found[0]
        variants = [r[0] for r in conn.execute("SELECT DISTINCT variant FROM trials WHERE run_id = ? ORDER BY 1",
                                               (run,))]
        if not variants:
            raise Failure(f"no trials of run {run!r} in this ledger (`agentledger runs` lists the runs)")
        if args.baseline and args.baseline not in variants:
            raise UsageError(f"--baseline {args.baseline}: run {run} has variants {', '.join(variants)}")
        exp = experiments.load(conn, run, baseline=args.baseline, seed=args.seed, prices=_prices(cfg))
    finally:
        conn.close()
    fmt = "json" if args.json else args.format
    print(render.to_json(exp.as_dict()) if fmt == "json" else experiments.render(exp, markdown=fmt == "markdown"))
    return EXIT_OK
