"""Benchmarks for the running daemon (issues #3 and #4). Prints figures; asserts nothing.

    python bench/bench_daemon.py [--iterations 10000] [--idle-seconds 60] [--closes 200] [--appends 100]
                                 [--churn-rounds 0]

Generates a log with a git repository and a Claude transcript, starts
``agentledger run`` (with a notification socket, so READY is known), then:

* idle CPU: the daemon's CPU time over ``--idle-seconds`` with nothing changing
  (target < 1 %);
* close latency: an agent commits and writes ``iter-N.yaml`` (temp file +
  rename); time until ``iter-N.score.yaml`` exists; p50/p95 over ``--closes``
  (target p95 ≤ 500 ms);
* transcript latency: a line with a tool error is appended inside an already
  closed iteration's window; time until that iteration's sidecar shows it;
  p50/p95 over ``--appends`` (target p95 ≤ 500 ms);
* RSS after the initial scan and after all of the above;
* a warm restart: SIGTERM, then ``agentledger run`` again on the same ledger and
  sources (nothing changed meanwhile); time from start to READY=1 (target ≤ 1 s at
  10,000, issue #25), beside the floor of a process that imports the daemon's modules
  and exits; then a SIGHUP with nothing changed, time to READY=1 (the reload's scan
  runs as its new watches' first);
* a stop during a first scan: ``agentledger run`` on a new ledger of the same sources,
  SIGTERM half as long after ``STATUS=initial scan`` as the first start's scan took;
  time from SIGTERM to exit, 3 times (the unit's TimeoutStopSec is 30 s; the scan ends
  at its next batch's commit);
* with ``--churn-rounds R``, a long mixed workload afterwards: each round
  edits 5 already closed iterations (editor-style save that changes their
  score), appends 3 transcript lines and closes one new iteration, then waits
  for its sidecar. RSS is sampled every R/10 rounds; "no growth" means the
  second half of the samples is flat once SQLite's page cache (64 MiB cap) and
  the commit-time cache are warm.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import preamble, pct, rss_mb
from agentledger.example import synth

T0 = 1_760_000_000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(pred, timeout: float = 30.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if pred():
            return time.perf_counter() - start
        time.sleep(0.002)
    raise SystemExit("timed out waiting for the daemon")


def churn_rounds(gen, pid: int, transcript: Path, first: int, rounds: int) -> dict | None:
    if not rounds:
        return None
    rng = random.Random(11)
    closed: list[int] = []
    samples, changes, start = [], 0, time.perf_counter()
    every = max(1, rounds // 10)
    for r in range(rounds):
        for i in rng.sample(closed, min(5, len(closed))):
            path = gen.log / f"iter-{i}.yaml"
            text = path.read_text()
            text = text.replace("retries: 0", "retries: 2") if "retries: 0" in text else \
                text.replace("retries: 1", "retries: 0").replace("retries: 2", "retries: 0")
            tmp = path.with_name(f".iter-{i}.yaml.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            changes += 1
        with transcript.open("a") as fh:
            for k in range(3):
                ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 60 * rng.randint(10, 1999))) + ".500Z"
                fh.write(json.dumps({"type": "user", "timestamp": ts, "message": {"content": [
                    {"type": "tool_result", "tool_use_id": f"c{r}-{k}", "is_error": k == 0}]}}) + "\n")
                changes += 1
        n = first + r
        synth.add_iteration(gen, n)
        changes += 1
        closed.append(n)
        wait_for((gen.log / f"iter-{n}.score.yaml").exists, timeout=60)
        if (r + 1) % every == 0:
            samples.append(round(rss_mb(pid)))
    return {"rounds": rounds, "changes": changes, "seconds": round(time.perf_counter() - start), "rss_mb": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=10000)
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--closes", type=int, default=200)
    ap.add_argument("--appends", type=int, default=100)
    ap.add_argument("--churn-rounds", type=int, default=0)
    args = ap.parse_args()
    print(preamble(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="agentledger-daemon-bench-"))
    proc = None
    try:
        gen = synth.generate(root / "gen", args.iterations)
        transcript = root / "claude" / "session.jsonl"
        synth.claude_transcript(transcript, min(args.iterations, 2000))
        sock_path = root / "notify.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(sock_path))
        sock.settimeout(600)
        cmd = [sys.executable, "-m", "agentledger", "run", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
               "--transcripts", str(transcript.parent), "--db", str(root / "ledger.sqlite"), "-q"]
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env={**os.environ, "NOTIFY_SOCKET": str(sock_path)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while b"READY=1" not in sock.recv(65536):
            pass
        startup = time.perf_counter() - started
        sock.setblocking(False)
        rss_ready = rss_mb(proc.pid)

        cpu0 = cpu_seconds(proc.pid)
        time.sleep(args.idle_seconds)
        idle = (cpu_seconds(proc.pid) - cpu0) / args.idle_seconds * 100

        closes = []
        for k in range(args.closes):
            n = args.iterations + 1 + k
            synth.add_iteration(gen, n)
            t = time.perf_counter()
            wait_for((gen.log / f"iter-{n}.score.yaml").exists)
            closes.append(time.perf_counter() - t)

        rng = random.Random(3)
        appends = []
        for k in range(args.appends):
            i = rng.randint(10, min(args.iterations, 2000) - 1)
            sidecar = gen.log / f"iter-{i}.score.yaml"
            before = sidecar.read_bytes()
            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 60 * i - 5)) + f".{k:03d}Z"
            with transcript.open("a") as fh:
                fh.write(json.dumps({"type": "user", "timestamp": ts, "message": {"content": [
                    {"type": "tool_result", "tool_use_id": f"b{k}", "is_error": True}]}}) + "\n")
            t = time.perf_counter()
            try:
                wait_for(lambda: sidecar.read_bytes() != before, timeout=10)
                appends.append(time.perf_counter() - t)
            except SystemExit:
                pass  # this iteration's commit does not resolve: no window, nothing to rewrite
        rss_end = rss_mb(proc.pid)
        churn = churn_rounds(gen, proc.pid, transcript, args.iterations + args.closes + 1, args.churn_rounds)
        proc.terminate()
        proc.wait(timeout=30)

        warm, reloads = [], []
        for _ in range(3):
            sock.settimeout(600)  # a service that never says READY fails the run, not hangs it
            started = time.perf_counter()
            proc = subprocess.Popen(cmd, env={**os.environ, "NOTIFY_SOCKET": str(sock_path)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while b"READY=1" not in sock.recv(65536):
                pass
            warm.append(time.perf_counter() - started)
            started = time.perf_counter()  # a reload (SIGHUP) with nothing changed: to READY=1
            proc.send_signal(signal.SIGHUP)
            while b"READY=1" not in sock.recv(65536):
                pass
            reloads.append(time.perf_counter() - started)
            proc.terminate()
            proc.wait(timeout=30)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import agentledger.service.daemon, agentledger.ledger"], check=True)
        imports = time.perf_counter() - t

        stops = []
        for k in range(3):
            sock.settimeout(600)  # a service that never says READY fails the run, not hangs it
            fresh = [*cmd[:-3], "--db", str(root / f"stopped-{k}.sqlite"), "-q"]
            proc = subprocess.Popen(fresh, env={**os.environ, "NOTIFY_SOCKET": str(sock_path)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while b"initial scan" not in sock.recv(65536):
                pass
            time.sleep(startup / 2)
            t = time.perf_counter()
            proc.terminate()
            proc.wait(timeout=120)
            stops.append(time.perf_counter() - t)

        ms = lambda xs, p: round(pct(xs, p) * 1000, 1)  # noqa: E731
        result = {
            "iterations": args.iterations, "startup_to_ready_s": round(startup, 2),
            "idle_cpu_percent": round(idle, 3), "idle_seconds": args.idle_seconds,
            "close_p50_ms": ms(closes, 50), "close_p95_ms": ms(closes, 95), "closes": len(closes),
            "transcript_p50_ms": ms(appends, 50) if appends else None,
            "transcript_p95_ms": ms(appends, 95) if appends else None, "appends_measured": len(appends),
            "rss_ready_mb": round(rss_ready, 1), "rss_end_mb": round(rss_end, 1),
            "warm_restart_to_ready_s": [round(w, 2) for w in warm], "imports_floor_s": round(imports, 2),
            "sigterm_in_first_scan_to_exit_s": [round(s, 2) for s in stops],
            "reload_to_ready_s": [round(r, 2) for r in reloads],
        }
        print(f"{args.iterations} iterations: ready in {startup:.1f} s; idle CPU {idle:.3f} % over {args.idle_seconds:.0f} s")
        print(f"close → sidecar: p50 {result['close_p50_ms']} ms, p95 {result['close_p95_ms']} ms over {len(closes)}")
        if appends:
            print(f"transcript line → rewritten sidecar: p50 {result['transcript_p50_ms']} ms, "
                  f"p95 {result['transcript_p95_ms']} ms over {len(appends)}")
        print(f"RSS: {rss_ready:.0f} MB when ready, {rss_end:.0f} MB after the closes and appends")
        print(f"warm restart → READY: {', '.join(f'{w:.2f}' for w in warm)} s (start and imports alone:"
              f" {imports:.2f} s)")
        print(f"SIGHUP, nothing changed → READY: {', '.join(f'{r:.2f}' for r in reloads)} s")
        print(f"SIGTERM {startup / 2:.1f} s into a first scan → exit: {', '.join(f'{s:.2f}' for s in stops)} s")
        if churn:
            result["churn"] = churn
            print(f"churn: {churn['rounds']} rounds ({churn['changes']} file changes) in {churn['seconds']} s;"
                  f" RSS samples (MB): {churn['rss_mb']}")
        print(json.dumps(result))
    finally:
        if proc is not None and proc.poll() is None:  # a run that failed leaves no service behind
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
