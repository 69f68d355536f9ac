"""Benchmarks for JSONL tailing (issue #3). Prints figures; asserts nothing.

    python bench/bench_tailing.py [--sizes-mb 10,1024] [--transcripts-mb 200] [--out DIR]

For each size it writes a vally ``results.jsonl`` of realistic ~16 KB
trial-result lines, then measures, in fresh processes:

* ``agentledger ingest --once --vally DIR``: MB/s, lines/s, peak RSS;
* a bare baseline over the same file, as the issue defines it: read lines,
  ``json.loads``, the same normalised row the ``trials`` table keeps (every
  fact, and the raw pointer with the line's sha256), one batched SQLite insert
  into a table without indexes, one transaction (target: agentledger ≥ 60 % of
  its throughput). No events, idempotency keys, projections, checkpoints or
  validation: that is the ledger's overhead being measured.

and the same for a directory of Claude transcripts (through an iteration log
whose transcript directory it is). The append-to-sidecar latency target needs
the daemon loop (issue #4) and is measured there.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import preamble, run
from agentledger.example import synth

BASELINE = r'''
import hashlib, json, sqlite3, sys
path, rel, db = sys.argv[1], sys.argv[2], sys.argv[3]
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("CREATE TABLE t (run_dir TEXT, item_id TEXT, run_id TEXT, eval_name TEXT, stimulus TEXT, model TEXT,"
             " variant TEXT, trial_index INT, status TEXT, duration_ms INT, grade_passed INT, grade_score REAL,"
             " passed INT, input_tokens INT, output_tokens INT, cache_read_tokens INT, cache_write_tokens INT,"
             " tool_calls INT, tool_errors INT, turns INT, raw_path TEXT, raw_offset INT, raw_length INT,"
             " raw_sha256 TEXT)")
conn.execute("BEGIN")
rows, off, run_dir = [], 0, rel.rpartition("/")[0]
with open(path, "rb") as fh:
    for line in fh:
        data = line.rstrip(b"\r\n")
        r = json.loads(data)
        t = r.get("trajectory") or {}
        m = t.get("metrics") or {}
        u = m.get("tokenUsage") or {}
        g = r.get("gradeResult") or {}
        x = r.get("experiment") or {}
        errors = sum(1 for e in t.get("events", ()) if e.get("type") == "tool_result"
                     and (e.get("data") or {}).get("success") is False)
        rows.append((run_dir, r.get("itemId"), r.get("runId") or x.get("runId") or "", r.get("evalName"),
                     r.get("stimulus"), r.get("model"), r.get("variant") or x.get("variant") or "main",
                     r.get("trialIndex"), r.get("status"), r.get("durationMs"), g.get("passed"), g.get("score"),
                     int(r.get("status") == "success" and bool(g.get("passed"))), u.get("inputTokens"),
                     u.get("outputTokens"), u.get("cacheReadTokens"), u.get("cacheWriteTokens"),
                     m.get("toolCallCount"), errors, m.get("turnCount"), rel, off, len(data),
                     hashlib.sha256(data).hexdigest()))
        off += len(line)
        if len(rows) >= 2000:
            conn.executemany("INSERT INTO t VALUES (" + ",".join("?" * 24) + ")", rows)
            rows.clear()
conn.executemany("INSERT INTO t VALUES (" + ",".join("?" * 24) + ")", rows)
conn.execute("COMMIT")
'''


# A narrower yardstick, kept for comparison: ten of the columns, no hash.
BASELINE_MINIMAL = r'''
import json, sqlite3, sys
path, db = sys.argv[1], sys.argv[3]
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("CREATE TABLE t (item TEXT, eval TEXT, model TEXT, status TEXT, passed INT, input INT, output INT,"
             " tools INT, errors INT, off INT)")
conn.execute("BEGIN")
rows, off = [], 0
with open(path, "rb") as fh:
    for line in fh:
        r = json.loads(line)
        t = r.get("trajectory") or {}
        m = t.get("metrics") or {}
        u = m.get("tokenUsage") or {}
        g = r.get("gradeResult") or {}
        errors = sum(1 for e in t.get("events", ()) if e.get("type") == "tool_result"
                     and (e.get("data") or {}).get("success") is False)
        rows.append((r.get("itemId"), r.get("evalName"), r.get("model"), r.get("status"),
                     int(bool(g.get("passed"))), u.get("inputTokens"), u.get("outputTokens"),
                     m.get("toolCallCount"), errors, off))
        off += len(line)
        if len(rows) >= 2000:
            conn.executemany("INSERT INTO t VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            rows.clear()
conn.executemany("INSERT INTO t VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
conn.execute("COMMIT")
'''


def write_results(path: Path, mb: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    target, lines = mb * 1024 * 1024, 0
    with path.open("wb", buffering=1 << 20) as fh:
        while fh.tell() < target:
            fh.write(synth.vally_trial_line(lines, pad=15000))
            lines += 1
    return lines


def write_transcripts(d: Path, mb: int) -> int:
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    lines = 0
    per_file = max(1, mb // 20) * 1024 * 1024
    for k in range(20):
        with (d / f"session-{k:02d}.jsonl").open("wb", buffering=1 << 20) as fh:
            t0 = 1_760_000_000 + k * 86400
            while fh.tell() < per_file:
                ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + lines)) + ".000Z"
                if lines % 3:
                    rec = {"type": "assistant", "timestamp": ts, "sessionId": f"s{k}", "cwd": "/repo",
                           "message": {"role": "assistant", "content": [{"type": "text", "text": "x" * 1500}],
                                       "usage": {"input_tokens": rng.randint(1, 900), "output_tokens": 50,
                                                 "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 300}}}
                else:
                    rec = {"type": "user", "timestamp": ts, "message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": f"t{lines}", "is_error": rng.random() < 0.1,
                         "content": "y" * 1500}]}}
                fh.write(json.dumps(rec).encode() + b"\n")
                lines += 1
    return lines


def warm(path: Path) -> None:
    """Read a file through the page cache (this VM's host reclaims cached pages between runs)."""
    with path.open("rb", buffering=0) as fh:
        while fh.read(1 << 24):
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", default="10,1024")
    ap.add_argument("--transcripts-mb", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds per size (default 3)")
    args = ap.parse_args()
    print(preamble(), flush=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="agentledger-tail-bench-"))
    py = sys.executable
    results = []
    for mb in (int(s) for s in args.sizes_mb.split(",")):
        root = out / f"vally-{mb}"
        shutil.rmtree(root, ignore_errors=True)
        f = root / "runs" / "2026-07-31T11-17-14-108Z" / "baseline" / "results.jsonl"
        lines = write_results(f, mb)
        size = f.stat().st_size / 1e6
        rounds = []
        for _ in range(args.repeat):  # interleaved, each from a warm page cache: this machine is noisy
            t = {}
            for name, cmd in (("baseline", [py, "-c", BASELINE]), ("minimal", [py, "-c", BASELINE_MINIMAL]),
                              ("agentledger", [py, "-m", "agentledger", "ingest", "--once", "-q", "--vally",
                                               str(root / "runs"), "--db"])):
                for p in root.glob("*.sqlite*"):
                    p.unlink()
                warm(f)
                db = str(root / f"{name}.sqlite")
                t[name] = run(cmd + [db] if name == "agentledger" else
                              cmd + [str(f), str(f.relative_to(root / "runs")), db])
            rounds.append(t)
        ratios = sorted(r["baseline"][0] / r["agentledger"][0] for r in rounds)
        minimal = sorted(r["minimal"][0] / r["agentledger"][0] for r in rounds)
        ours = min(r["agentledger"][0] for r in rounds)
        base = min(r["baseline"][0] for r in rounds)
        results.append({"input_mb": round(size, 1), "lines": lines, "rounds": len(rounds),
                        "agentledger_s": [round(r["agentledger"][0], 2) for r in rounds],
                        "baseline_s": [round(r["baseline"][0], 2) for r in rounds],
                        "minimal_baseline_s": [round(r["minimal"][0], 2) for r in rounds],
                        "agentledger_mb_s": round(size / ours, 1), "agentledger_lines_s": round(lines / ours),
                        "baseline_mb_s": round(size / base, 1), "ratio_median": round(ratios[len(ratios) // 2], 2),
                        "ratio_range": [round(ratios[0], 2), round(ratios[-1], 2)],
                        "ratio_to_minimal_median": round(minimal[len(minimal) // 2], 2),
                        "agentledger_peak_rss_mb": round(max(r["agentledger"][1] for r in rounds) / 1024),
                        "baseline_peak_rss_mb": round(max(r["baseline"][1] for r in rounds) / 1024)})
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'input':>9} {'lines':>8} {'agentledger':>13} {'lines/s':>9} {'baseline':>10} {'ratio':>6}"
          f" {'(range)':>11} {'vs minimal':>10} {'peak RSS':>9}")
    for r in results:
        print(f"{r['input_mb']:>6} MB {r['lines']:>8} {r['agentledger_mb_s']:>8} MB/s {r['agentledger_lines_s']:>9}"
              f" {r['baseline_mb_s']:>5} MB/s {r['ratio_median']:>6} {str(r['ratio_range']):>11}"
              f" {r['ratio_to_minimal_median']:>10} {r['agentledger_peak_rss_mb']:>6} MB")
    print("(best of each, ratios are medians of per-round pairs; baseline = the issue's definition,"
          " minimal = parse and ten columns, no hash)")
    if args.transcripts_mb:
        root = out / "transcripts"
        shutil.rmtree(root, ignore_errors=True)
        lines = write_transcripts(root / "claude", args.transcripts_mb)
        size = sum(p.stat().st_size for p in (root / "claude").iterdir()) / 1e6
        gen = synth.generate(root / "log", 20)
        secs, rss = run([py, "-m", "agentledger", "ingest", "--once", "--iteration-log", str(gen.log),
                         "--repo", str(gen.repo), "--transcripts", str(root / "claude"),
                         "--db", str(root / "ledger.sqlite"), "-q"])
        print(f"Claude transcripts: {size:.0f} MB, {lines} lines in {secs:.1f} s: {size / secs:.1f} MB/s, "
              f"{lines / secs:.0f} lines/s, peak RSS {rss // 1024} MB")
        results.append({"transcripts_mb": round(size), "lines": lines, "mb_s": round(size / secs, 1),
                        "peak_rss_mb": rss // 1024})
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results))
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
