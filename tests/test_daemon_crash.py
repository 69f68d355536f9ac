"""SIGKILL `agentledger run` ≥ 50 times during a mixed workload; nothing is lost, duplicated or torn."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

RECORD = "schema_version: 1\niteration: {n}\nscope_note: on-target\ntests_total_pass: true\nretries: {r}\n"
T0 = 1_760_000_000


@pytest.mark.slow
def test_sigkill_fifty_times_then_compare_with_a_clean_ingest(tmp_path: Path, make_repo) -> None:
    repo = make_repo()
    log = tmp_path / "log"
    log.mkdir()
    transcripts = tmp_path / "claude"
    transcripts.mkdir()
    tfile = transcripts / "s.jsonl"
    tfile.touch()
    rng = random.Random(11)
    state = {"next": 1, "retries": {}, "lines": 0}

    def work(stop: threading.Event) -> None:
        while not stop.is_set():
            n = state["next"]
            state["next"] += 1
            tmp = log / f".iter-{n}.tmp"
            tmp.write_text(RECORD.format(n=n, r=0))
            os.replace(tmp, log / f"iter-{n}.yaml")  # atomic, as the agent writes it
            if n > 3 and rng.random() < 0.5:  # an edit of an earlier iteration: always new content
                m = rng.randint(1, n - 1)
                state["retries"][m] = state["retries"].get(m, 0) + 1
                tmp = log / f".iter-{m}.tmp"
                tmp.write_text(RECORD.format(n=m, r=state["retries"][m]))
                os.replace(tmp, log / f"iter-{m}.yaml")
            with tfile.open("a") as fh:
                for _ in range(3):
                    state["lines"] += 1
                    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + state["lines"]))
                    fh.write(json.dumps({"type": "assistant", "timestamp": ts + ".000Z", "message": {
                        "usage": {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 3,
                                  "cache_creation_input_tokens": 1}}}) + "\n")
            time.sleep(rng.uniform(0.0, 0.02))

    args = ["--iteration-log", str(log), "--repo", str(repo.path), "--transcripts", str(transcripts)]
    db = tmp_path / "killed.sqlite"
    cmd = [sys.executable, "-m", "agentledger", "run", *args, "--db", str(db), "-q"]
    kills = 0
    for _ in range(50):
        stop = threading.Event()
        writer = threading.Thread(target=work, args=(stop,))
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        writer.start()
        time.sleep(rng.uniform(0.05, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += proc.returncode == -signal.SIGKILL
        stop.set()
        writer.join()
    assert kills == 50

    # settle: one clean run of the daemon over the final inputs
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    n_last = state["next"] - 1
    while time.monotonic() < deadline and not (log / f"iter-{n_last}.score.yaml").exists():
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0

    sidecars = {p.name: p.read_bytes() for p in log.glob("*.score.yaml")}
    assert len([k for k in sidecars if k.startswith("iter-")]) == n_last
    for name, data in sidecars.items():  # nothing torn: every sidecar is whole YAML
        assert isinstance(yaml.safe_load(data), dict), name

    clean = tmp_path / "clean.sqlite"
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--once", "--json", *args,
                          "--db", str(clean)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sidecars_written"] == 0  # the killed ledger's sidecars are the clean ones
    assert {p.name: p.read_bytes() for p in log.glob("*.score.yaml")} == sidecars

    def facts(path: Path):
        with sqlite3.connect(path) as c:
            return (set(c.execute("SELECT iteration, rubric_version, inputs_hash, value, band FROM scores")),
                    c.execute("SELECT count(*), sum(turns), sum(cache_read) FROM transcript_facts").fetchone(),
                    c.execute("SELECT count(*) FROM (SELECT source_path, content_hash FROM events WHERE type ="
                              " 'iteration.recorded' GROUP BY 1, 2 HAVING count(*) > 1)").fetchone()[0])

    killed_scores, killed_turns, killed_dups = facts(db)
    clean_scores, clean_turns, _ = facts(clean)
    assert killed_scores == clean_scores
    assert killed_turns == clean_turns == (state["lines"], state["lines"], 3 * state["lines"])
    assert killed_dups == 0
    rebuilt = subprocess.run([sys.executable, "-m", "agentledger", "rebuild", "--json", *args, "--db", str(db)],
                             capture_output=True, text=True)
    assert rebuilt.returncode == 0 and json.loads(rebuilt.stdout)["sidecars_written"] == 0
