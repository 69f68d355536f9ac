"""Benchmarks for the foundation (issue #2). Prints figures; asserts nothing.

    python bench/bench_iterlog.py [--sizes 100,10000] [--runs 5] [--out DIR]

For each size N it generates a synthetic iteration log with a matching git
repository (agentledger.example.synth), then measures, each as a fresh process the way
users run it:

* cold ``agentledger ingest --once`` of the whole log (target: ≤ 10 s at 10,000);
* ``agentledger score K`` for the newest iteration, the close-task hook, median
  of --runs after the ledger is warm (target: ≤ 300 ms at 10,000 and ≤ 1.3× the
  figure at 100), once with the iteration unchanged and once just written;
* ``agentledger backfill`` 2.1.0 → 3.0.0 of every iteration (target: ≤ 5 s at 10,000);
* the switch back, ``backfill --rubric 2.1.0``, whose scores the ledger holds: it costs
  what it writes (every sidecar), not a rescore.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentledger.example import synth


def run(args: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "agentledger", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    dt = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"agentledger {' '.join(args)} failed:\n{proc.stderr}")
    return dt


def bench(n: int, runs: int, out: Path) -> dict:
    root = out / f"n{n}"
    if root.exists():
        shutil.rmtree(root)
    t = time.perf_counter()
    gen = synth.generate(root, n)
    gen_s = time.perf_counter() - t
    db = root / "ledger.sqlite"
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "-q"]

    ingest_s = run(["ingest", "--once", *common])
    unchanged = [run(["score", str(n), *common]) for _ in range(runs)]
    written = []
    for k in range(runs):
        synth.add_iteration(gen, n + 1 + k)
        written.append(run(["score", str(n + 1 + k), *common]))
    backfill_s = run(["backfill", *common, "--rubric", "3.0.0"])
    switch_back_s = run(["backfill", *common, "--rubric", "2.1.0"])
    events = subprocess.run([sys.executable, "-m", "agentledger", "query", "SELECT count(*) AS n FROM events",
                             "--json", "--db", str(db)], capture_output=True, text=True).stdout
    return {
        "iterations": n,
        "generate_s": round(gen_s, 2),
        "ingest_once_s": round(ingest_s, 2),
        "score_unchanged_median_ms": round(statistics.median(unchanged) * 1000, 1),
        "score_new_iteration_median_ms": round(statistics.median(written) * 1000, 1),
        "backfill_s": round(backfill_s, 2),
        "switch_back_s": round(switch_back_s, 2),
        "events": json.loads(events)[0]["n"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,10000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agentledger-bench-"))
    results = [bench(int(s), args.runs, out) for s in args.sizes.split(",")]
    print(f"{'N':>7} {'ingest --once':>14} {'score (same)':>13} {'score (new)':>12} {'backfill':>9} {'back':>7} {'events':>7}")
    for r in results:
        print(f"{r['iterations']:>7} {r['ingest_once_s']:>12.2f} s {r['score_unchanged_median_ms']:>10.1f} ms"
              f" {r['score_new_iteration_median_ms']:>9.1f} ms {r['backfill_s']:>7.2f} s {r['switch_back_s']:>5.2f} s {r['events']:>7}")
    if len(results) >= 2:
        small, big = results[0], results[-1]
        ratio = big["score_new_iteration_median_ms"] / small["score_new_iteration_median_ms"]
        print(f"score N at {big['iterations']} / at {small['iterations']}: {ratio:.2f}x")
    print(json.dumps(results))
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
