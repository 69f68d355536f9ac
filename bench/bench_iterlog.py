"""Benchmarks for the foundation (issue #2). Prints figures; asserts nothing.

    python bench/bench_iterlog.py [--sizes 100,10000] [--runs 5] [--out DIR]

For each size N it generates a synthetic iteration log with a matching git
repository (agentledger.example.synth), then measures, each as a fresh process the way
users run it:

* cold ``agentledger ingest --once`` of the whole log;
* ``agentledger score K`` for the newest iteration, the close-task hook, median
  of --runs after the ledger is warm, once with the iteration unchanged and once just
  written, working in its own process; then on just-written iterations while
  ``agentledger run`` serves the ledger (the service answers the hook);
* ``agentledger backfill`` 2.1.0 → 3.0.0 of every iteration;
* the switch back, ``backfill --rubric 2.1.0``, whose scores the ledger holds: it costs
  what it writes (every sidecar), not a rescore;
* ``agentledger ingest --once`` again with nothing changed (median of --runs), once the
  directory has been quiet past the racy window: with no mark kept (each run after the
  ``scan_marks`` row is deleted: every file compared, as the first scan after a change
  does), then with the mark the last of those kept;

each beside its floor, measured in the same run (scripts that do the same I/O and
nothing else): for the hook, a process that imports the YAML parser, parses
``iter-N.yaml``, makes one git call, commits one SQLite transaction and writes one
fsync'd file; for the re-ingest, a process that lists the log directory, stats every
file and reads the ledger's checkpoints; for the cold ingest, one that parses every file
of the log with libyaml, makes one ``git log`` of the history, inserts a row a file and a
row an iteration in one transaction and writes a new file an iteration (temp file and
rename); for the backfill, one that reads every record and every score payload from the
ledger, inserts a row a score in one transaction and replaces a file an iteration, as a
bulk pass of agentledger replaces them (the new file swapped into place with
``renameat2(RENAME_EXCHANGE)``, the old one's inode written again for the next, once a
write lease shows nobody has it open: ``output/spare.py``); for the switch back, the
same without the records and the transaction. Peak RSS of each command is printed too,
and the CPU time (user and system) of the cold ingest, the backfill and their floors,
summed over every process of each (worker pools and git included): on a machine whose
cores all of a command keeps busy, its CPU over the cores is the least its wall time
can be.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Spawner, preamble
from agentledger.example import synth


PEAK_KB: dict[str, int] = {}  # command -> the largest peak RSS any run of it had
# started by ``main`` before it generates a log (its own RSS stays out of the figures), not on
# import: a script importing this module for its floors starts no process and leaves no file
SPAWNER: Spawner | None = None


AGENTLEDGER = Path(sys.executable).with_name("agentledger")  # the console script, as the workflow runs it


def run(args: list[str], env: dict | None = None, *, script: str | None = None,
        cpu: list[float] | None = None) -> float:
    """Seconds one process took (``agentledger ARGS``: the console script beside this
    Python, else ``python -m agentledger``; or ``python -c SCRIPT ARGS``); ``cpu`` gets
    the CPU seconds all its processes used."""
    me = [str(AGENTLEDGER)] if AGENTLEDGER.exists() else [sys.executable, "-m", "agentledger"]
    cmd = [sys.executable, "-c", script, *args] if script else [*me, *args]
    dt, status, peak, err, used = SPAWNER.run(cmd, env)
    if cpu is not None:
        cpu.append(used)
    if status != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{err}")
    name = "floor" if script else args[0]
    PEAK_KB[name] = max(PEAK_KB.get(name, 0), peak)
    return dt


HOOK_FLOOR = r"""
import os, sqlite3, subprocess, sys, yaml
log, repo, db, n = sys.argv[1:]
rec = yaml.load(open(os.path.join(log, f"iter-{n}.yaml"), "rb"), Loader=yaml.CSafeLoader)
subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "-q", str(rec.get("commit")) + "^{commit}"],
               capture_output=True)
c = sqlite3.connect(db, isolation_level=None)
c.execute("CREATE TABLE IF NOT EXISTS floor (k INTEGER PRIMARY KEY, v TEXT)")
c.execute("BEGIN IMMEDIATE"); c.execute("INSERT OR REPLACE INTO floor VALUES (?, ?)", (int(n), str(rec)[:100]))
c.execute("COMMIT")
tmp = os.path.join(log, f".floor-{n}.tmp")
with open(tmp, "wb") as fh:
    fh.write(b"score: 0.5\n" * 20); fh.flush(); os.fsync(fh.fileno())
os.replace(tmp, os.path.join(log, "floor.out"))
"""

REINGEST_FLOOR = r"""
import os, sqlite3, sys
log, db = sys.argv[1:]
with os.scandir(log) as it:
    stats = {e.name: e.stat() for e in it}
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
rows = c.execute("SELECT path, dev, ino, size, mtime_ns, content_hash FROM source_checkpoints").fetchall()
"""


INGEST_FLOOR = r"""
import json, os, sqlite3, subprocess, sys, yaml
log, repo, db = sys.argv[1:]
names = sorted(n for n in os.listdir(log) if n.endswith(".yaml") and not n.endswith(".score.yaml"))
rows = []
for n in names:
    with open(os.path.join(log, n), "rb") as f:
        rows.append((n, json.dumps(yaml.load(f, Loader=yaml.CSafeLoader), default=str)))
subprocess.run(["git", "-C", repo, "log", "--format=%H %ct %s", "--name-only"], capture_output=True)
c = sqlite3.connect(db)
c.execute("CREATE TABLE e (k INTEGER PRIMARY KEY, name TEXT, v TEXT)")
records = [r for r in rows if r[0].count(".") == 1 and r[0].startswith("iter-")]
with c:
    c.executemany("INSERT INTO e (name, v) VALUES (?, ?)", rows + [(n, v[:3000]) for n, v in records])
for n, v in records:
    tmp = os.path.join(log, f".floor-{n}")
    with open(tmp, "wb") as f:
        f.write(v[:1800].encode())
    os.rename(tmp, os.path.join(log, n[:-5] + ".floor.yaml"))
"""

SWITCH_FLOOR = r"""
import ctypes, fcntl, os, sqlite3, sys
log, db, score = sys.argv[1:]
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
if score == "score":
    c.execute("SELECT record FROM iteration_records").fetchall()
rows = c.execute("SELECT json_extract(payload, '$.iteration'), payload FROM events WHERE type = 'score.computed'"
                 " AND json_extract(payload, '$.rubric_version') = '2.1.0'").fetchall()
if score == "score":
    out = sqlite3.connect(os.path.join(os.path.dirname(db), "floor.sqlite"))
    out.execute("CREATE TABLE IF NOT EXISTS s (k INTEGER PRIMARY KEY, v TEXT)")
    with out:
        out.executemany("INSERT INTO s (v) VALUES (?)", [(p,) for _, p in rows])
tmp = os.path.join(log, ".floor-spare").encode()
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
for it, payload in rows:  # each file swapped into place, the old one's inode taken for the next
    data = payload[:1800].encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.close(fd)
    renameat2(-100, tmp, -100, os.path.join(log, f"iter-{it}.floor.yaml").encode(), 2)
    fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW)
    os.fstat(fd)
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
os.close(fd)
os.unlink(tmp)
"""


def settle(log: Path) -> None:
    """Until the newest change in ``log`` is older than the racy window, as a quiet
    directory is between changes: a scan that begins within it keeps no mark."""
    from agentledger.sources.iterlogs.listing import RACY_NS

    newest = max(max(st.st_ctime_ns, st.st_mtime_ns) for st in (os.stat(p) for p in [log, *log.iterdir()]))
    while time.time_ns() <= newest + RACY_NS:
        time.sleep(0.01)


def forget_marks(db: Path) -> None:
    c = sqlite3.connect(db)
    with c:
        c.execute("DELETE FROM scan_marks")
    c.close()


def floor_files(log: Path, remove: bool = False) -> None:
    """The files the floors write (``iter-N.floor.yaml``), outside their timing: made
    before a floor that replaces them, removed after."""
    for p in log.glob("iter-*.yaml"):
        if p.name.count(".") == 1:
            target = p.with_name(p.name[:-5] + ".floor.yaml")
            if remove:
                target.unlink(missing_ok=True)
            else:
                target.write_bytes(b"floor\n" * 300)


def hook_with_service(gen, common: list[str], first: int, runs: int) -> list[float]:
    """``agentledger score N`` on just-written iterations while ``agentledger run`` serves the
    ledger (the hook's request answered by the service; it also sees the file appear). The
    closes start once the service is ready (its start-up scan done) and has handled one
    close (its first builds the index of the iterations' commits: ~3 s at 100,000)."""
    db = common[common.index("--db") + 1]
    log = Path(db + ".service.log")
    with open(log, "wb") as out:
        service = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--log-format", "json",
                                    *[a for a in common if a != "-q"]], stdout=out, stderr=subprocess.STDOUT)
    try:
        while b'"event": "ready"' not in log.read_bytes():
            if service.poll() is not None:
                raise SystemExit(f"agentledger run exited:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        synth.add_iteration(gen, first)  # the warm-up close
        run(["score", str(first), *common])
        times = []
        for k in range(first + 1, first + 1 + runs):
            time.sleep(0.5)  # an agent closes an iteration every few minutes, not back to back:
            # the service has seen the last close by now (its watch also rescores that iteration)
            synth.add_iteration(gen, k)
            times.append(run(["score", str(k), *common]))
        return times
    finally:
        service.terminate()
        service.wait()
        log.unlink(missing_ok=True)


STALE: list[Path] = []  # an earlier run's trees in --out: removed once every figure is taken


def bench(n: int, runs: int, out: Path) -> dict:
    root = out / f"n{n}"
    if root.exists():
        # moved aside, removed at the end: files made soon after tens of thousands
        # were deleted are slow to create on this machine's ext4 (a cold ingest's floor took
        # 6.2 s instead of 3.0 right after the last run's tree was deleted)
        aside = root.with_name(f"{root.name}.old-{os.getpid()}")
        root.rename(aside)
        STALE.append(aside)
    t = time.perf_counter()
    gen = synth.generate(root, n)
    gen_s = time.perf_counter() - t
    db = root / "ledger.sqlite"
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "-q"]

    cpu: dict[str, list[float]] = {k: [] for k in ("ingest", "ingest_floor", "backfill", "backfill_floor")}
    ingest_s = run(["ingest", "--once", *common], cpu=cpu["ingest"])
    ingest_floor_s = run([str(gen.log), str(gen.repo), str(root / "ingest-floor.sqlite")], script=INGEST_FLOOR,
                         cpu=cpu["ingest_floor"])
    floor_files(gen.log, remove=True)
    settle(gen.log)
    # a scan with nothing changed compares each file with the ledger when no quiet scan's
    # mark vouches for the directory (the first after any change); one that finds it in
    # line keeps a mark, which the next trusts (ledger/scan_marks.py)
    reingest_compare = []
    for _ in range(runs):
        forget_marks(db)
        reingest_compare.append(run(["ingest", "--once", *common]))
    reingest = [run(["ingest", "--once", *common]) for _ in range(runs)]
    c = sqlite3.connect(db)
    marks = c.execute("SELECT count(*) FROM scan_marks").fetchone()[0]
    c.close()
    reingest_floor = [run([str(gen.log), str(db)], script=REINGEST_FLOOR) for _ in range(runs)]
    unchanged = [run(["score", str(n), *common]) for _ in range(runs)]
    written, floor = [], []
    for k in range(runs):
        synth.add_iteration(gen, n + 1 + k)
        written.append(run(["score", str(n + 1 + k), *common]))
        floor.append(run([str(gen.log), str(gen.repo), str(root / "floor.sqlite"), str(n + 1 + k)],
                         script=HOOK_FLOOR))
    (gen.log / "floor.out").unlink()
    served = hook_with_service(gen, common, n + 1 + runs, runs)
    backfill_s = run(["backfill", *common, "--rubric", "3.0.0"], cpu=cpu["backfill"])
    switch_back_s = run(["backfill", *common, "--rubric", "2.1.0"])
    floor_files(gen.log)  # the floors replace existing files, as both backfills do
    backfill_floor_s = run([str(gen.log), str(db), "score"], script=SWITCH_FLOOR, cpu=cpu["backfill_floor"])
    switch_floor_s = run([str(gen.log), str(db), "write"], script=SWITCH_FLOOR)
    floor_files(gen.log, remove=True)
    events = subprocess.run([sys.executable, "-m", "agentledger", "query", "SELECT count(*) AS n FROM events",
                             "--json", "--db", str(db)], capture_output=True, text=True).stdout
    return {
        "iterations": n,
        "generate_s": round(gen_s, 2),
        "ingest_once_s": round(ingest_s, 2),
        "ingest_floor_s": round(ingest_floor_s, 2),
        "backfill_floor_s": round(backfill_floor_s, 2),
        "switch_back_floor_s": round(switch_floor_s, 2),
        "score_unchanged_median_ms": round(statistics.median(unchanged) * 1000, 1),
        "score_new_iteration_median_ms": round(statistics.median(written) * 1000, 1),
        "hook_floor_median_ms": round(statistics.median(floor) * 1000, 1),
        "score_new_served_median_ms": round(statistics.median(served) * 1000, 1),
        "reingest_median_s": round(statistics.median(reingest), 3),
        "reingest_compare_median_s": round(statistics.median(reingest_compare), 3),
        "marks_kept": marks,
        "reingest_floor_median_s": round(statistics.median(reingest_floor), 3),
        "peak_rss_mb": {k: round(v / 1024) for k, v in PEAK_KB.items()},
        "backfill_s": round(backfill_s, 2),
        "switch_back_s": round(switch_back_s, 2),
        "events": json.loads(events)[0]["n"],
        "cpu_s": {k: round(v[0], 2) for k, v in cpu.items()},  # user + system, all of each command's processes
    }


def main() -> None:
    global SPAWNER
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,10000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    SPAWNER = Spawner()
    print(preamble(), flush=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="agentledger-bench-"))
    try:
        measure(args, out)
    finally:
        SPAWNER.close(stop=True)  # (idle after the last figure) a stopped run's command ends first
        for tree in STALE:
            shutil.rmtree(tree, ignore_errors=True)
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)


def measure(args: argparse.Namespace, out: Path) -> None:
    """Every size's figures, printed (the trees under ``out``; ``main`` removes them)."""
    results = []
    for s in args.sizes.split(","):
        PEAK_KB.clear()
        results.append(bench(int(s), args.runs, out))
    print(f"{'N':>7} {'ingest --once':>14} {'score (same)':>13} {'score (new)':>12} {'backfill':>9} {'back':>7} {'events':>7}")
    for r in results:
        print(f"{r['iterations']:>7} {r['ingest_once_s']:>12.2f} s {r['score_unchanged_median_ms']:>10.1f} ms"
              f" {r['score_new_iteration_median_ms']:>9.1f} ms {r['backfill_s']:>7.2f} s {r['switch_back_s']:>5.2f} s {r['events']:>7}")
    for r in results:
        print(f"{r['iterations']:>7}: hook {r['score_new_iteration_median_ms']:.0f} ms against its floor"
              f" {r['hook_floor_median_ms']:.0f} ms ({r['score_new_iteration_median_ms'] / r['hook_floor_median_ms']:.2f}x),"
              f" answered by the running service {r['score_new_served_median_ms']:.0f} ms"
              f" ({r['score_new_served_median_ms'] / r['hook_floor_median_ms']:.2f}x);"
              f" re-ingest with nothing changed {r['reingest_median_s']:.3f} s against its floor"
              f" {r['reingest_floor_median_s']:.3f} s (with no mark kept, every file compared:"
              f" {r['reingest_compare_median_s']:.3f} s; marks kept after: {r['marks_kept']});"
              f" peak RSS MB {r['peak_rss_mb']}")
        print(f"{r['iterations']:>7}: cold ingest {r['ingest_once_s']:.2f} s against its floor {r['ingest_floor_s']:.2f} s"
              f" ({r['ingest_once_s'] / r['ingest_floor_s']:.2f}x); backfill {r['backfill_s']:.2f} s against"
              f" {r['backfill_floor_s']:.2f} s; switch back {r['switch_back_s']:.2f} s against"
              f" {r['switch_back_floor_s']:.2f} s")
        c, cores = r["cpu_s"], os.cpu_count()
        print(f"{r['iterations']:>7}: CPU (user + system, every process of the command): cold ingest"
              f" {c['ingest']:.2f} s, its floor {c['ingest_floor']:.2f} s; backfill {c['backfill']:.2f} s, its floor"
              f" {c['backfill_floor']:.2f} s; on {cores} cores the cold ingest cannot take less than"
              f" {c['ingest'] / cores:.2f} s, the backfill {c['backfill'] / cores:.2f} s")
    if len(results) >= 2:
        small, big = results[0], results[-1]
        ratio = big["score_new_iteration_median_ms"] / small["score_new_iteration_median_ms"]
        print(f"score N at {big['iterations']} / at {small['iterations']}: {ratio:.2f}x")
    print(json.dumps(results))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (trees, the spawner's file) when stopped
    try:
        main()
    finally:
        if SPAWNER is not None:
            SPAWNER.close()
