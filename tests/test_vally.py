"""Tailing vally results: the real fixture, every file-lifecycle case, and SIGKILL at random points."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentledger.config import Config, LimitsConfig, StoreConfig, VallySource
from agentledger.example import synth
from agentledger.ledger import Ledger

from .conftest import cli_subprocess, need_fixtures, run_cli, wait_until

RUN = "2026-07-31T11-17-14-108Z/baseline"


def ledger(tmp: Path, root: Path, **limits) -> Ledger:
    cfg = Config(store=StoreConfig(path=tmp / "l.sqlite"), limits=LimitsConfig(**limits),
                 vally=(VallySource(root.resolve()),))
    return Ledger(cfg)


def count(led: Ledger, sql: str, *args) -> int:
    return led.conn.execute(sql, args).fetchone()[0]


def test_real_vally_fixture(tmp_path: Path) -> None:
    fixtures = need_fixtures() / "vally"
    run = tmp_path / "out" / RUN
    run.mkdir(parents=True)
    shutil.copy(fixtures / "baseline__results.first-record.jsonl", run / "results.jsonl")
    args = ["--vally", str(tmp_path / "out"), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", "--once", *args)[0] == 0
    code, out, _ = run_cli("trials", "--json", *args)
    (t,) = json.loads(out)
    assert (t["eval_name"], t["model"], t["variant"], t["trial_index"], t["status"], t["passed"]) == \
        ("migrate-mstest-v1v2-to-v3", "claude-opus-4.6", "baseline", 0, "success", 1)
    assert (t["input_tokens"], t["output_tokens"], t["cache_read_tokens"], t["cache_write_tokens"]) == \
        (78796, 822, 64955, 13833)
    assert (t["tool_calls"], t["turns"], t["duration_ms"], t["grade_score"]) == (7, 6, 36236, 1.0)
    raw = (run / "results.jsonl").read_bytes()[t["raw_offset"]: t["raw_offset"] + t["raw_length"]]
    assert json.loads(raw)["itemId"] == t["item_id"]  # the event points at the raw record's bytes
    code, out, _ = run_cli("runs", "--json", *args)
    (r,) = json.loads(out)
    assert r["complete"] == 0 and r["kind"] == "experiment" and r["trials"] == 1
    shutil.copy(fixtures / "baseline__run-summary.jsonl", run / "run-summary.jsonl")
    run_cli("ingest", "--once", *args)
    (r,) = json.loads(run_cli("runs", "--json", *args)[1])
    assert r["complete"] == 1 and r["run_id"] == "5160984c-53f8-4363-893d-bb091abbc3c1"
    rates = json.loads(run_cli("query", "SELECT * FROM trial_pass_rates", "--json", *args)[1])
    assert rates[0]["pass_rate"] == 1.0


def test_file_lifecycle(tmp_path: Path) -> None:
    root = tmp_path / "out"
    f = root / "run-a" / "results.jsonl"
    f.parent.mkdir(parents=True)
    led = ledger(tmp_path, root, max_line_bytes=4096)
    src = led.cfg.vally[0]
    trials = lambda: count(led, "SELECT count(*) FROM trials")  # noqa: E731
    events = lambda t: count(led, "SELECT count(*) FROM events WHERE type = ?", t)  # noqa: E731

    # a partial last line waits for its newline
    line0, line1 = synth.vally_trial_line(0), synth.vally_trial_line(1)
    f.write_bytes(line0 + line1[:-10])
    led.ingest_vally(src)
    assert trials() == 1
    with f.open("ab") as fh:
        fh.write(line1[-10:])
    led.ingest_vally(src)
    assert trials() == 2 and events("trial.completed") == 2

    # an invalid line in the middle, and an over-long one, are quarantined; the lines after them ingest
    with f.open("ab") as fh:
        fh.write(b"{not json\n" + synth.vally_trial_line(2) + b"\xff\xfe\n" + b"x" * 9000 + b"\n"
                 + synth.vally_trial_line(3))
    report = led.ingest_vally(src)
    assert trials() == 4 and report.quarantined == 3
    q = led.conn.execute("SELECT line, byte_offset, reason FROM quarantine ORDER BY line").fetchall()
    assert [r[0] for r in q] == [3, 5, 6]
    assert q[0][1] == len(line0) + len(line1) and "not a JSON object" in q[0][2]
    assert "invalid UTF-8" in q[1][2] and "over the max_line_bytes limit" in q[2][2]

    # truncation: read again from the start, logged as a reset, nothing duplicated
    f.write_bytes(line0)
    led.ingest_vally(src)
    assert events("source.reset") == 1 and events("trial.completed") == 4 and trials() == 4

    # replacement (rename over) with new content: a reset and only the new trial is new
    tmp = f.with_name("results.jsonl.new")
    tmp.write_bytes(synth.vally_trial_line(10) + line0)
    os.replace(tmp, f)
    led.ingest_vally(src)
    assert events("source.reset") == 2 and events("trial.completed") == 5

    # delete: history stays; recreate: read from the start
    f.unlink()
    report = led.ingest_vally(src)
    assert trials() == 5 and not report.errors
    f.write_bytes(synth.vally_trial_line(11))
    led.ingest_vally(src)
    assert events("trial.completed") == 6 and events("source.reset") == 3
    (offset, size) = led.conn.execute("SELECT byte_offset, size FROM source_checkpoints").fetchone()
    assert offset == size == f.stat().st_size

    # a re-reported trial (same itemId, new content) replaces its row; run counters follow
    with f.open("ab") as fh:
        fh.write(synth.vally_trial_line(11).replace(b'"durationMs":', b'"durationMs":1'))
    led.ingest_vally(src)
    run = led.conn.execute("SELECT trials, passed, errors FROM runs WHERE run_dir = 'run-a'").fetchone()
    recount = led.conn.execute("SELECT count(*), sum(passed), sum(status = 'error') FROM trials"
                               " WHERE run_dir = 'run-a'").fetchone()
    assert tuple(run) == tuple(recount) and recount[0] == 6

    # the vally projections are derived state too
    from agentledger.store.projections import rebuild

    dump = lambda: [sorted(map(tuple, led.conn.execute(f"SELECT * FROM {t}"))) for t in ("runs", "trials")]  # noqa: E731
    before = dump()
    rebuild(led.conn)
    assert dump() == before


def test_values_sqlite_or_json_cannot_hold_are_quarantined_and_repeats_in_one_batch_count_once(
        tmp_path: Path) -> None:
    root = tmp_path / "out"
    f = root / "run-b" / "results.jsonl"
    f.parent.mkdir(parents=True)
    led = ledger(tmp_path, root)
    line = synth.vally_trial_line(0)
    nan = synth.vally_trial_line(1).replace(b'"score":', b'"score":NaN,"x":', 1)
    huge = synth.vally_trial_line(2).replace(b'"durationMs":', b'"durationMs":99999999999999999999999,"x":', 1)
    assert nan != synth.vally_trial_line(1) and huge != synth.vally_trial_line(2)
    again = line.replace(b'"durationMs":', b'"durationMs":1', 1)  # same trial re-reported, same batch
    f.write_bytes(line + nan + huge + again + line)
    report = led.ingest_vally(led.cfg.vally[0])
    assert report.quarantined == 2 and not report.errors
    reasons = sorted(r[0] for r in led.conn.execute("SELECT reason FROM quarantine"))
    assert reasons == ["record: durationMs: Input should be less than or equal to 9223372036854775807",
                       "record: gradeResult.score: Input should be a finite number"]
    # lines 1 and 5 are the same bytes: one event; line 4 replaced the trial's row
    assert count(led, "SELECT count(*) FROM events WHERE type = 'trial.completed'") == 2
    assert count(led, "SELECT count(*) FROM trials") == 1
    assert tuple(led.conn.execute("SELECT trials, passed, errors FROM runs").fetchone()) == \
        tuple(led.conn.execute("SELECT count(*), sum(passed), sum(status = 'error') FROM trials").fetchone())
    assert count(led, "SELECT duration_ms FROM trials") == int(b"1" + line.split(b'"durationMs":')[1].split(b",")[0])


def test_parallel_tailing_equals_sequential_tailing(tmp_path: Path, monkeypatch) -> None:
    """A backlog parsed by worker processes in line-aligned chunks gives the very events,
    projections and checkpoint the sequential reader gives; lines it cannot number
    (quarantine) and over-long lines are handled by the committing process."""
    import functools

    from agentledger.process import parallel
    from agentledger.sources import jsonl

    root = tmp_path / "out"
    f = root / "run-p" / "results.jsonl"
    f.parent.mkdir(parents=True)
    body = b"".join(synth.vally_trial_line(i) for i in range(120))
    body += b"{not json\n" + b"".join(synth.vally_trial_line(i) for i in range(120, 200))
    body += b"y" * 9000 + b"\n" + b"".join(synth.vally_trial_line(i) for i in range(200, 230))
    f.write_bytes(body + synth.vally_trial_line(230)[:50])  # and a partial last line

    def run(db: str, parallel_min: str):
        monkeypatch.setenv("AGENTLEDGER_PARALLEL_TAIL_BYTES", parallel_min)
        cfg = Config(store=StoreConfig(path=tmp_path / db), limits=LimitsConfig(max_line_bytes=8192),
                     vally=(VallySource(root.resolve()),))
        led = Ledger(cfg)
        report = led.ingest_vally(cfg.vally[0])
        c = led.conn
        out = {
            "events": c.execute("SELECT type, idempotency_key, content_hash, payload FROM events ORDER BY seq").fetchall(),
            "trials": c.execute("SELECT * FROM trials ORDER BY item_id").fetchall(),
            "runs": c.execute("SELECT * FROM runs").fetchall(),
            "quarantine": c.execute("SELECT path, line, byte_offset, reason FROM quarantine ORDER BY line").fetchall(),
            "checkpoint": c.execute("SELECT byte_offset, line_no, fingerprint FROM source_checkpoints").fetchall(),
            # a bulk catch-up hands back the connection's durability settings as it found them
            "pragmas": [c.execute("PRAGMA synchronous").fetchone(), c.execute("PRAGMA wal_autocheckpoint").fetchone()],
        }
        led.close()
        return report, {k: [tuple(r) for r in v] for k, v in out.items()}

    if parallel.executor() is None:
        pytest.skip("one core: no worker processes to tail with")
    _, sequential = run("seq.sqlite", str(1 << 40))
    monkeypatch.setattr(jsonl, "plan", functools.partial(jsonl.plan, block=4096))  # ~2 lines per chunk
    report, parallel_ = run("par.sqlite", "1")
    assert report.quarantined == 2 and not report.errors
    assert parallel_ == sequential
    assert [q[1] for q in parallel_["quarantine"]] == [121, 202]  # true line numbers
    assert parallel_["checkpoint"][0][:2] == (len(body), 232)  # 120 + 1 + 80 + 1 + 30 lines
    assert parallel_["pragmas"] == [(2,), (1000,)]  # FULL, the default checkpoint interval


def test_growing_file_appended_by_another_process(tmp_path: Path) -> None:
    root = tmp_path / "out"
    f = root / "run" / "results.jsonl"
    f.parent.mkdir(parents=True)
    f.touch()
    n = 400
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom agentledger.example import synth\n"
        f"with open({str(f)!r}, 'ab', buffering=0) as fh:\n"
        f"    for i in range({n}):\n"
        "        line = synth.vally_trial_line(i)\n"
        "        fh.write(line[:len(line)//2]); time.sleep(0.0005); fh.write(line[len(line)//2:])\n")])
    led = ledger(tmp_path, root)
    while writer.poll() is None:
        led.ingest_vally(led.cfg.vally[0])
    led.ingest_vally(led.cfg.vally[0])
    assert writer.returncode == 0
    assert count(led, "SELECT count(*) FROM trials") == n
    assert count(led, "SELECT count(*) FROM events WHERE type = 'trial.completed'") == n
    assert count(led, "SELECT count(*) FROM quarantine") == 0


@pytest.mark.parametrize("reader", ["sequential", "parallel"])
def test_a_stop_ends_a_long_catch_up_at_a_commit_and_the_next_scan_goes_on(tmp_path: Path, monkeypatch,
                                                                           reader: str) -> None:
    """The daemon's SIGTERM (``ctx.stopping``) during a catch-up of many batches: it ends
    right after a commit, with that commit's position, and the next scan reads on from
    there to the same ledger as one uninterrupted catch-up."""
    from agentledger.errors import Stopping

    root = tmp_path / "out"
    f = root / "run" / "results.jsonl"
    f.parent.mkdir(parents=True)
    n = 12000 if reader == "sequential" else 3000  # 3 batches of 5,000 lines; ~20 chunks of 64 KiB
    if reader == "parallel":
        monkeypatch.setenv("AGENTLEDGER_PARALLEL_TAIL_BYTES", "1")
        monkeypatch.setenv("AGENTLEDGER_PARALLEL_TAIL_BLOCK", str(64 << 10))
    with f.open("wb") as fh:
        for i in range(n):
            fh.write(synth.vally_trial_line(i, pad=200))
    whole = tmp_path / "whole"
    whole.mkdir()
    with contextlib.closing(ledger(whole, root)) as led:
        led.scan_all()
        expected = sorted(map(tuple, led.conn.execute("SELECT idempotency_key, payload FROM events")))
    asked = []
    with contextlib.closing(ledger(tmp_path, root)) as led:
        led.ctx.stopping = lambda: asked.append(1) or True  # asked for as the first commit lands
        with pytest.raises(Stopping):
            led.scan_all()
        (offset,) = led.conn.execute("SELECT byte_offset FROM source_checkpoints").fetchone()
        trials = count(led, "SELECT count(*) FROM events")
    assert len(asked) == 1 and 0 < offset < f.stat().st_size and 0 < trials < len(expected)
    with contextlib.closing(ledger(tmp_path, root)) as led:
        led.scan_all()
        assert sorted(map(tuple, led.conn.execute("SELECT idempotency_key, payload FROM events"))) == expected


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["sequential", "parallel"])
def test_sigkill_at_random_points_loses_and_duplicates_nothing(tmp_path: Path, monkeypatch, reader: str) -> None:
    """Exactly once across SIGKILLs, for the sequential reader and for the parallel
    catch-up (64 KiB chunks committed under NORMAL, the last under FULL)."""
    root = tmp_path / "out"
    f = root / "run" / "results.jsonl"
    f.parent.mkdir(parents=True)
    db = tmp_path / "killed.sqlite"
    cmd = [sys.executable, "-m", "agentledger", "ingest", "--once", "--vally", str(root), "--db", str(db), "-q"]
    per_round = 6000  # more than one batch of the sequential reader (5,000 lines)
    if reader == "parallel":
        monkeypatch.setenv("AGENTLEDGER_PARALLEL_TAIL_BYTES", "1")
        monkeypatch.setenv("AGENTLEDGER_PARALLEL_TAIL_BLOCK", str(64 << 10))
        per_round = 3000

    def offset() -> int | None:
        if not db.exists():
            return None
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                row = c.execute("SELECT byte_offset FROM source_checkpoints").fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    rng = random.Random(42)
    kills = written = midway = 0
    for _attempt in range(40):
        with f.open("ab") as fh:  # fresh work every time, so each run has something to be killed in
            for i in range(written, written + per_round):
                fh.write(synth.vally_trial_line(i, pad=200))
        written += per_round
        before = offset()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # a condition, not a delay: the run has committed part of its backlog, then (half the
        # time) a random moment more; whatever the machine's speed, the kill lands mid-run
        wait_until(lambda: offset() != before or proc.poll() is not None, 60, 0.002)
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0, 0.05))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
            proc.wait()
            row = offset()  # killed between two commits of one catch-up: some committed, some not
            midway += row is not None and 0 < row < f.stat().st_size and row != before
        proc.wait()
        if kills >= 20 and midway >= 3:
            break
    assert kills >= 20
    assert midway >= 3, midway
    assert cli_subprocess("ingest", "--once", "--vally", str(root), "--db", str(db), "-q").returncode == 0
    clean = tmp_path / "clean.sqlite"
    assert cli_subprocess("ingest", "--once", "--vally", str(root), "--db", str(clean), "-q").returncode == 0

    def facts(path: Path):
        with sqlite3.connect(path) as c:
            keys = [r[0] for r in c.execute("SELECT idempotency_key FROM events WHERE type = 'trial.completed'")]
            trials = c.execute("SELECT count(*) FROM trials").fetchone()[0]
            offset = c.execute("SELECT byte_offset FROM source_checkpoints").fetchone()[0]
        return sorted(keys), trials, offset

    killed_keys, killed_trials, killed_offset = facts(db)
    clean_keys, clean_trials, clean_offset = facts(clean)
    assert len(killed_keys) == len(set(killed_keys))  # no duplicates
    assert killed_keys == clean_keys  # no loss
    assert killed_trials == clean_trials and killed_offset == clean_offset == f.stat().st_size


def test_strange_graders_never_cost_a_trial(tmp_path: Path) -> None:
    """gradeResult.details is read leniently: a string, numbers, nameless graders, a score
    too large for a float — the trial is ingested, only real graders are kept."""
    from agentledger.example import synth

    run = tmp_path / "out" / "run-a"
    run.mkdir(parents=True)
    shapes = ["not a list", [1, "x", None], [{"name": 5, "passed": True}],
              [{"name": "huge", "passed": True, "score": 10 ** 400}, {"name": "ok", "passed": False, "score": 0.5}]]
    lines = []
    for i, details in enumerate(shapes):
        rec = json.loads(synth.vally_trial_line(i))
        rec["gradeResult"]["details"] = details
        lines.append(json.dumps(rec) + "\n")
    (run / "results.jsonl").write_text("".join(lines))
    args = ["--vally", str(tmp_path / "out"), "--db", str(tmp_path / "l.sqlite")]
    code, _, err = run_cli("ingest", *args)
    assert code == 0, err
    rows = json.loads(run_cli("query", "SELECT graders_passed, graders_total FROM trials ORDER BY raw_offset",
                              "--json", *args)[1])
    assert [(r["graders_passed"], r["graders_total"]) for r in rows] == [(None, None)] * 3 + [(1, 2)]
    graders = json.loads(run_cli("query", "SELECT name, passed, score FROM trial_graders ORDER BY ordinal",
                                 "--json", *args)[1])
    assert graders == [{"name": "huge", "passed": 1, "score": None}, {"name": "ok", "passed": 0, "score": 0.5}]
    assert json.loads(run_cli("query", "SELECT count(*) AS n FROM quarantine", "--json", *args)[1])[0]["n"] == 0
