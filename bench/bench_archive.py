"""A large historical.yaml read whole and an entry at a time: CPU seconds and peak RSS of
each, each in a process of its own (VmHWM), on a real-format archive made from the
fixture's entries (``--iterations``, default 20,000); the machine's pace at its start and end.
The whole-document read is the floor the entry-at-a-time read is measured against.

    python bench/bench_archive.py [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from _common import preamble

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT.parent / "shared" / "fixtures" / "dot-agents" / ".agents" / "active" / "iteration-log" / "historical.yaml"

CHILD = """
import json, resource, sys, time
from agentledger.sources.iterlogs.records import parse_historical
text = open(sys.argv[1]).read()
start = time.process_time()
n = len(parse_historical(text, entry_at_a_time_from=0 if sys.argv[2] == "entry" else 10**15))
cpu = time.process_time() - start
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print(json.dumps({"records": n, "cpu_s": round(cpu, 2), "peak_mb": int(hwm.split()[1]) // 1024}))
"""


def archive(n: int) -> str:
    text = FIXTURE.read_text()
    head, _, body = text.partition("iterations:\n")
    entries = [e for e in re.split(r"(?m)^(?=  - schema_version:)", body) if e.strip()]
    return head + "iterations:\n" + "".join(
        re.sub(r"(?m)^    iteration: \d+$", f"    iteration: {k + 1}", entries[k % len(entries)], count=1)
        for k in range(n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=20_000)
    args = ap.parse_args()
    print(preamble(), flush=True)
    path = Path("/tmp") / f"agentledger-bench-archive-{args.iterations}.yaml"
    path.write_text(archive(args.iterations))
    try:
        print(f"historical.yaml of {args.iterations:,} iterations, {path.stat().st_size:,} bytes")
        for mode in ("whole", "entry"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True,
                                 check=True).stdout
            r = json.loads(out)
            print(f"  {mode:<6} {r['records']:>8,} records  {r['cpu_s']:>6.2f} CPU s  {r['peak_mb']:>6,} MB peak")
    finally:
        path.unlink()


if __name__ == "__main__":
    main()
