"""``make demo``: the ledger's main job on a generated example, start to finish.

Runs the real ``agentledger`` command for every step and prints what a user
would type and see. Exits by itself; leaves everything under ``--out``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from . import synth


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}")


def agentledger(*args: str, cfg: Path, show: int | None = None) -> str:
    cmd = ["agentledger", *args, "--config", str(cfg)]
    print("$ " + " ".join(shlex.quote(c) for c in cmd))
    proc = subprocess.run([sys.executable, "-m", "agentledger", *cmd[1:]], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    lines = out.rstrip("\n").splitlines()
    for line in lines[:show] if show else lines:
        print("  " + line)
    if show and len(lines) > show:
        print(f"  … ({len(lines) - show} more lines)")
    if proc.returncode not in (0,):
        print(f"  (exit status {proc.returncode})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("demo-out"))
    ap.add_argument("--iterations", type=int, default=60)
    args = ap.parse_args()
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)

    step(f"Generate an example: {args.iterations} closed iterations, sessions, hook outcomes, labels, "
         "and a git repository with reverts and an unmerged branch")
    gen = synth.generate(out / "example", args.iterations)
    transcripts = out / "example" / "claude-transcripts"
    synth.claude_transcript(transcripts / "session.jsonl", args.iterations)
    runs = out / "example" / "vally-results" / "2026-11-22T08-00-00-000Z" / "baseline"
    runs.mkdir(parents=True)
    with (runs / "results.jsonl").open("wb") as fh:
        for i in range(12):
            fh.write(synth.vally_trial_line(i))
    cfg = out / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "ledger.sqlite"\n\n[scoring]\nrubric = "2.1.0"\n\n'
                   f'[[iteration_logs]]\nname = "example"\npath = "{gen.log}"\nrepo = "{gen.repo}"\n'
                   f'transcripts = ["{transcripts}"]\n\n[[vally]]\npath = "{runs.parent.parent}"\n')
    print(f"  iteration log: {gen.log}\n  transcripts:   {transcripts}\n  vally runs:    {runs.parent.parent}"
          f"\n  config:        {cfg}")

    step("Ingest everything once: events into the ledger, a score sidecar beside every iteration")
    agentledger("ingest", "--once", cfg=cfg)
    agentledger("status", cfg=cfg)

    step("Transcripts fill in token efficiency where a record has no native telemetry")
    agentledger("query", "SELECT iteration, json_extract(r.value, '$.detail') AS token_efficiency FROM score_details,"
                " json_each(score_details.breakdown) AS r WHERE json_extract(r.value, '$.signal') = 'token_efficiency'"
                " AND json_extract(r.value, '$.detail') LIKE 'backfilled%' ORDER BY iteration LIMIT 4", cfg=cfg)
    agentledger("runs", cfg=cfg)

    step("The close-task hook: an agent commits and closes iterations; each is scored on the spot")
    n = args.iterations
    for k in (1, 2, 3):
        synth.add_iteration(gen, n + k)
        agentledger("score", str(n + k), cfg=cfg, show=4 if k < 3 else None)
    print(f"\n$ cat {gen.log / f'iter-{n + 3}.score.yaml'}")
    for line in (gen.log / f"iter-{n + 3}.score.yaml").read_text().splitlines()[:14]:
        print("  " + line)
    print("  …")

    step("Bad input is quarantined, never fatal; the next good write is picked up")
    bad = gen.log / f"iter-{n + 4}.yaml"
    bad.write_text("schema_version: 2\niteration: [oops\n")
    agentledger("ingest", "--once", cfg=cfg)
    agentledger("quarantine", cfg=cfg)
    synth.add_iteration(gen, n + 4)
    agentledger("ingest", "--once", cfg=cfg)
    agentledger("quarantine", cfg=cfg)

    step("Query the ledger directly (read-only)")
    agentledger("query", "SELECT band, count(*) AS iterations, round(avg(value), 3) AS mean_value "
                "FROM scores WHERE rubric_version = '2.1.0' GROUP BY band ORDER BY mean_value DESC", cfg=cfg)
    agentledger("query", "SELECT session_id, json_array_length(iterations) AS iterations, round(value, 3) AS value, "
                "band FROM sessions ORDER BY value LIMIT 5", cfg=cfg)
    agentledger("query", "SELECT json_extract(r.value, '$.signal') AS signal, "
                "sum(json_extract(r.value, '$.present')) AS present_in, "
                "round(avg(json_extract(r.value, '$.sub_score')), 3) AS mean_sub_score "
                "FROM score_details, json_each(score_details.breakdown) AS r "
                "WHERE json_extract(r.value, '$.present') GROUP BY signal ORDER BY mean_sub_score", cfg=cfg)

    step("Bump the rubric in the config: every iteration is rescored under 3.0.0 from the ledger (no re-parse)")
    cfg.write_text(cfg.read_text().replace('rubric = "2.1.0"', 'rubric = "3.0.0"'))
    print(f"$ sed -i 's/rubric = \"2.1.0\"/rubric = \"3.0.0\"/' {cfg}")
    agentledger("backfill", cfg=cfg)
    head = (gen.log / "iter-1.score.yaml").read_text().splitlines()[:5]
    print(f"$ head -5 {gen.log / 'iter-1.score.yaml'}\n" + "\n".join("  " + h for h in head))
    agentledger("query", "SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY n DESC", cfg=cfg)

    step("Rebuild every projection from the events: sidecars come out byte-identical")
    before = {p.name: p.read_bytes() for p in gen.log.glob("*.score.yaml")}
    agentledger("rebuild", cfg=cfg)
    after = {p.name: p.read_bytes() for p in gen.log.glob("*.score.yaml")}
    print(f"  {len(after)} sidecars, {sum(before[k] != after.get(k) for k in before)} changed")
    print(f"\nDone. Everything is under {out}; try: agentledger status --config {cfg}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
