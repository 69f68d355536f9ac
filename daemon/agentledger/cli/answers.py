"""Commands that answer "did it get better?": ``compare``."""

from __future__ import annotations

import argparse
import sys

from .common import EXIT_FAIL, EXIT_OK, UsageError, read_only


def add_commands(cmd) -> None:
    p = cmd("compare", "Compare two cohorts (A, the baseline, and B) metric by metric: the difference with a 95 %"
                       " interval, a p-value from the right test, and a verdict (improved / regressed / no"
                       " detectable change).")
    p.add_argument("kind", nargs="?", choices=("iterations", "trials"), default="iterations",
                   help="iterations (scores and signals; default) or trials (vally: pass rates, tokens, …)")
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
    _, conn = read_only(args)
    try:
        row = conn.execute("SELECT value FROM ledger_state WHERE key = 'active_rubric'").fetchone()
        result = compare(conn, args.kind, a, b, active=row[0] if row else None, metrics=args.metric or None,
                         paired=args.paired, alpha=args.alpha, seed=args.seed)
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
