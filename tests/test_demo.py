"""`make demo` runs the main job end to end: this runs the same module in a temp
directory and checks what it says it shows, so the demo cannot rot unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_demo_runs_the_main_job_and_exits_by_itself(tmp_path: Path) -> None:
    out = tmp_path / "demo-out"
    proc = subprocess.run([sys.executable, "-m", "agentledger.example.demo", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = proc.stdout
    for shown in ("READY", "sidecars rewritten under 3.0.0", "exited with status 0", "score.computed",
                  "sidecars, 0 changed", "report: 65 iterations"):
        assert shown in text, shown
    log = out / "example" / "repo" / ".agents" / "active" / "iteration-log"
    assert len(list(log.glob("iter-*.score.yaml"))) == 65
    assert all("rubric_version: 3.0.0" in p.read_text() for p in log.glob("iter-*.score.yaml"))
    assert '<figure id="trend-overall">' in (out / "report.html").read_text()
    import importlib.util

    from agentledger.example import pgcluster

    if pgcluster.available() and importlib.util.find_spec("psycopg") is not None:  # the team part
        table = text.split("FROM latest_scores GROUP BY 1", 1)[1]
        assert "ci-runner  30" in table and "laptop     65" in table, table[:500]
        assert '<figure id="by-machine">' in (out / "team-report.html").read_text()
    hint = [line.strip() for line in text.splitlines() if line.strip().endswith("agentledger.toml")][-2:]
    for line in hint:  # the last hints work as printed, from another directory
        run = subprocess.run(line, shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert run.returncode == 0 and run.stdout, (line, run.stderr)
