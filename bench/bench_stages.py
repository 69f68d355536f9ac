"""Where a cold ingest's time goes, stage by stage. Prints figures; asserts nothing.

    python bench/bench_stages.py [--iterations 10000]

It generates a synthetic log (agentledger.example.synth) and measures:

* a record file's stages, each over every ``iter-N.yaml`` of the log in this process
  (the workers' collector pace, ``process/collector.py``): reading it, composing its
  nodes with libyaml, parsing it to the data model with yaml.v3's semantics (composing
  included), the record's JSON form, the event's JSON text and its hash; beside them
  the cold ingest floor's own per-file work (``bench_iterlog.INGEST_FLOOR``: PyYAML's
  ``CSafeLoader`` load and ``json.dumps``);
* a cold ``agentledger ingest --once`` run as a child process with its phases marked
  (the child wraps a few of the ledger's functions with timestamps) and the machine's
  busy share sampled from ``/proc/stat`` every 50 ms: the start (imports, schema,
  listing, the first jobs), the log files' observations and commits, the artifacts'
  (and the transcripts, and waiting for git's answers), the planner, the scoring pass
  (its inputs gathered, scored, committed, sidecars written, detectors fed) and the end;
* an iteration scored, from the ledger that ingest made, in this process: gathering its
  inputs, its job pickled and unpickled (what crosses to a worker), then in the order a
  worker runs them, the inputs hash, the record decoded, the scorer, the payload's JSON
  and the sidecar's bytes, the first time (a fresh worker's lookups are empty) and again.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import preamble
from agentledger.example import synth

# In the child: the phases' marks, and the machine's busy share every 50 ms, printed as
# JSON on stderr's last line once the command has returned.
CHILD = r"""
import functools, json, os, sys, threading, time
T0, marks, busy = time.perf_counter(), [], []
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def timed(*a, **k):
        marks.append((time.perf_counter() - T0, label, "start"))
        try:
            return f(*a, **k)
        finally:
            marks.append((time.perf_counter() - T0, label, "end"))
    setattr(owner, name, timed)
def sample():
    def read():
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    last = read()
    while True:
        time.sleep(0.05)
        cur = read()
        total, idle = cur[0] - last[0], cur[1] - last[1]
        busy.append((time.perf_counter() - T0, 1 - idle / total if total else 0.0))
        last = cur
if __name__ == "__main__":
    threading.Thread(target=sample, daemon=True).start()
    from agentledger.cli import common
    from agentledger.ledger import iterlogs, planner, scoring_pass
    wrap(common, "open_ledger", "open the ledger")
    wrap(iterlogs.IterationLogs, "_commit", "observe and commit")
    wrap(planner.Planner, "affected", "plan")
    wrap(scoring_pass.ScoringPass, "score", "score")
    from agentledger.cli import main
    code = main(sys.argv[1:])
    marks.append((time.perf_counter() - T0, "command", "end"))
    print(json.dumps({"marks": marks, "busy": busy}), file=sys.stderr, flush=True)
    sys.exit(code)
"""


def per_file(log: Path) -> list[tuple[str, float]]:
    """Microseconds a record file for each stage (and the floor's), over every record."""
    import gc
    import hashlib

    from agentledger.process import collector
    from agentledger.reference.yamlv3.decode import compose_first
    from agentledger.sources.iterlogs.records import parse_record
    from agentledger.store.events import canonical_json
    import yaml

    collector.pace()
    names = sorted(n for n in os.listdir(log) if n.startswith("iter-") and n.count(".") == 1)
    out = []

    def stage(label, fn, items):
        gc.collect()
        t = time.perf_counter()
        result = [fn(x) for x in items]
        out.append((label, (time.perf_counter() - t) / len(items) * 1e6))
        return result

    datas = stage("read the file", lambda n: (log / n).read_bytes(), names)
    texts = [d.decode() for d in datas]
    for t in texts:  # nodes dropped as they are made, as a worker drops them
        compose_first(t)
    stage("compose its nodes (libyaml)", lambda t: compose_first(t) and None, texts)
    recs = stage("parse to the data model (composing included)", parse_record, texts)
    jsons = stage("the record's JSON form", lambda r: r.to_json(), recs)
    texts_out = stage("the event's JSON text", lambda pair: canonical_json({"file": pair[0], "record": pair[1]}),
                      list(zip(names, jsons)))
    stage("its hash", lambda s: hashlib.sha256(s.encode()).hexdigest(), texts_out)
    loaded = stage("floor: CSafeLoader load", lambda t: yaml.load(t, Loader=yaml.CSafeLoader), texts)
    stage("floor: json.dumps", lambda v: json.dumps(v, default=str), loaded)
    return out


def phases(gen, db: Path) -> tuple[list[tuple[str, float, float, float]], float]:
    """(phase, start, seconds, busy share) of a cold ingest, and its wall time."""
    cmd = [sys.executable, "-c", CHILD, "ingest", "--once", "--iteration-log", str(gen.log), "--repo",
           str(gen.repo), "--db", str(db), "-q"]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"ingest failed:\n{done.stderr[-3000:]}")
    data = json.loads(done.stderr.strip().splitlines()[-1])
    marks, busy = data["marks"], data["busy"]

    def at(label: str, what: str, pick=min) -> float:  # when the first (or last) such mark was made
        return pick(t for t, name, edge in marks if name == label and edge == what)

    logs, logs_end, plan = at("observe and commit", "start"), at("observe and commit", "end"), at("plan", "start")
    first_score, score_end, end = at("score", "start"), at("score", "end", max), max(t for t, _, _ in marks)
    edges = [("start: imports, the schema, the listing, the first jobs", 0.0, logs),
             ("the log files: observed in the workers, committed here", logs, logs_end),
             ("the artifacts and plans, the transcripts, git's answers", logs_end, plan),
             ("the planner: what to score", plan, first_score),
             ("the scoring pass: inputs, scores, sidecars, detectors", first_score, score_end),
             ("end: the last sync, closing", score_end, end)]
    out = []
    for label, a, b in edges:
        inside = [share for at, share in busy if a < at <= b]
        out.append((label, a, b - a, sum(inside) / len(inside) if inside else float("nan")))
    return out, wall


def per_iteration(gen, db: Path) -> list[tuple[str, float]]:
    """Microseconds an iteration for each step of scoring it, over every iteration."""
    import gc

    from multiprocessing.reduction import ForkingPickler

    from agentledger.cli import build_parser, common
    from agentledger.ledger.score_job import payload_json, sidecar_bytes
    from agentledger.scoring import rubric as rubrics
    from agentledger.scoring.combine import score

    args = build_parser().parse_args(["backfill", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
                                      "--db", str(db), "-q"])
    ledger = common.open_ledger(args)
    try:
        src = ledger.ctx.cfg.iteration_logs[0]
        version = ledger.rubric.version
        rubric = rubrics.load(version)
        out = []
        gc.collect()
        t = time.perf_counter()
        jobs = ledger.scoring._part_jobs(ledger.scoring.inputs, src, version, False, None)
        n = len(jobs)
        out.append(("gather its inputs (SQLite, git)", (time.perf_counter() - t) / n * 1e6))
        chunks = [jobs[i:i + 512] for i in range(0, n, 512)]
        t = time.perf_counter()
        blobs = [bytes(ForkingPickler.dumps((None, c))) for c in chunks]
        out.append(("its job pickled (512 a chunk)", (time.perf_counter() - t) / n * 1e6))
        t = time.perf_counter()
        for b in blobs:
            pickle.loads(b)
        out.append(("... and unpickled in a worker", (time.perf_counter() - t) / n * 1e6))
        gathered = [j[2] for j in jobs]
        for label in ("first time", "again"):
            t = time.perf_counter()
            for g in gathered:
                g.digests(version, False)
            t1 = time.perf_counter()
            inputs = [g.inputs() for g in gathered]
            t2 = time.perf_counter()
            scores = [score(rubric, i) for i in inputs]
            t3 = time.perf_counter()
            rows = []
            for s, g in zip(scores, gathered):
                r: list[str] = []
                payload_json(s, "sha256:0", False, "sha256:0", g.window, r)
                rows.append(r)
            t4 = time.perf_counter()
            for s, r in zip(scores, rows):
                sidecar_bytes(s, r, False)
            t5 = time.perf_counter()
            out += [(f"inputs hash ({label})", (t1 - t) / n * 1e6), (f"record decoded ({label})", (t2 - t1) / n * 1e6),
                    (f"scored ({label})", (t3 - t2) / n * 1e6), (f"payload JSON ({label})", (t4 - t3) / n * 1e6),
                    (f"sidecar bytes ({label})", (t5 - t4) / n * 1e6)]
        return out
    finally:
        ledger.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=10_000)
    args = ap.parse_args()
    print(preamble(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="agentledger-stages-"))
    try:
        gen = synth.generate(root / "gen", args.iterations)
        print(f"\na record file, each stage over the {args.iterations:,} records (us a file):")
        for label, us in per_file(gen.log):
            print(f"  {label:50s} {us:8.1f}")
        db = root / "ledger.sqlite"
        rows, wall = phases(gen, db)
        print(f"\na cold ingest of {args.iterations:,} iterations, {wall:.2f} s (phase, from, seconds, machine busy):")
        for label, at, seconds, share in rows:
            shown = "    -" if share != share else f"{share * 100:5.0f}"  # NaN: no sample inside
            print(f"  {label:58s} {at:6.2f} {seconds:6.2f} s {shown} %")
        print(f"\nan iteration scored, each step over the {args.iterations:,} iterations (us an iteration):")
        for label, us in per_iteration(gen, db):
            print(f"  {label:50s} {us:8.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
