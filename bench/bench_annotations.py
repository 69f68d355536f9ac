"""Benchmark for annotated trajectories (issue #5). Prints figures; asserts nothing.

    python bench/bench_annotations.py [--files 10000] [--fixtures ../shared/fixtures/annotated]

The 40 real annotation files are repeated (each copy made unique by its task
id) to ``--files`` files, then measured:

* the parser alone, in this process: files/s, Markdown lines/s, control-flow lines/s;
* ``agentledger ingest --once --annotations DIR`` in a fresh process (read, hash,
  parse, one event per file, projections, vocabulary), cold: files/s, peak RSS;
* the same command again with nothing changed (stat only).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import preamble, run
from agentledger.sources.annotations import parse as P


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--fixtures", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "annotated")
    args = ap.parse_args()
    print(preamble(), flush=True)
    sources = sorted(p for p in args.fixtures.glob("*.md") if p.name != "PROVENANCE.md")
    if not sources:
        raise SystemExit(f"no annotation fixtures in {args.fixtures}")
    texts = [p.read_bytes() for p in sources]
    out = Path(tempfile.mkdtemp(prefix="agentledger-annotations-bench-"))
    try:
        root = out / "analyses"
        corpus = []
        for k in range(args.files):
            data = texts[k % len(texts)].replace(b"taskId: ", f"taskId: c{k}-".encode(), 1)
            d = root / f"run-{k // 500:03d}" / "trajectories"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"t{k}.md").write_bytes(data)
            corpus.append(data)
        md_lines = sum(t.count(b"\n") for t in corpus)

        t0 = time.perf_counter()
        flow = 0
        for data in corpus:
            flow += P.parse(data).control_flow_lines
        parse_s = time.perf_counter() - t0

        db = out / "ledger.sqlite"
        cmd = [sys.executable, "-m", "agentledger", "ingest", "--once", "--annotations", str(root), "--db", str(db),
               "-q"]
        cold_s, rss = run(cmd)
        warm_s, _ = run(cmd)
        result = {
            "files": args.files, "markdown_lines": md_lines, "control_flow_lines": flow,
            "parse_files_s": round(args.files / parse_s), "parse_lines_s": round(md_lines / parse_s),
            "parse_flow_lines_s": round(flow / parse_s),
            "ingest_cold_s": round(cold_s, 2), "ingest_files_s": round(args.files / cold_s),
            "ingest_unchanged_s": round(warm_s, 2), "ingest_peak_rss_mb": rss // 1024,
            "ledger_mb": round(db.stat().st_size / 1e6, 1),
        }
        print(f"parse: {args.files} files ({md_lines} Markdown lines, {flow} control-flow lines) in {parse_s:.2f} s:"
              f" {result['parse_files_s']} files/s, {result['parse_lines_s']} lines/s")
        print(f"ingest --once, cold: {cold_s:.2f} s ({result['ingest_files_s']} files/s, peak RSS {rss // 1024} MB);"
              f" unchanged: {warm_s:.2f} s; ledger {result['ledger_mb']} MB")
        print(json.dumps(result))
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
