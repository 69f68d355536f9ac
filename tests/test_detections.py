"""Regressions noticed while they happen (#24, item 3), on real ledgers: a planted
regression in each source kind is found near where it began, with what changed there;
fed once whatever the order of processes; rebuilt from events; handed to a user's
command as JSON on stdin, and that command is never a shell."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from agentledger.example import synth

from tests.conftest import query, cli_subprocess, run_cli, wait_until

COLUMNS = "kind, feed, source, scope, metric, began, noticed, points, before, after, size_sd, signals, changed"


def detections(db: Path) -> list[tuple]:
    return query(db, f"SELECT {COLUMNS} FROM detections ORDER BY seq")


@pytest.fixture(scope="module")
def regressed(tmp_path_factory):
    """400 iterations; from iteration 250 on another model and worse work."""
    root = tmp_path_factory.mktemp("regressed")
    gen = synth.generate(root / "gen", 400, seed=3, regress_at=250)
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo)]
    code, out, err = run_cli("ingest", *args, "--db", str(root / "l.sqlite"))
    assert code == 0, err
    return gen, args, root / "l.sqlite", out, err


def test_a_planted_regression_is_found_where_it_began_with_what_changed_there(regressed) -> None:
    gen, _, db, out, err = regressed
    found = [dict(zip(COLUMNS.split(", "), r)) for r in detections(db)]
    overall = [d for d in found if d["metric"] == "score"]
    assert len(overall) == 1, found
    d = overall[0]
    began = int(d["began"].split()[-1])
    noticed = int(d["noticed"].split()[-1])
    assert d["kind"] == "regression" and d["feed"] == "iterations" and d["source"] == str(gen.log)
    assert 240 <= began <= 255 and 250 <= noticed <= 280 and d["after"] < d["before"] and d["size_sd"] < -0.5
    changed = json.loads(d["changed"])
    assert {"what": "model", "from": "synthetic-1", "to": "synthetic-2", "at": "iteration 250"} in changed
    moved = json.loads(d["signals"])
    assert moved and all(s["size_sd"] <= -0.5 for s in moved)  # the signals that moved with it, all down
    # nothing in the 249 stationary iterations before it, and no improvement anywhere
    assert all(int(x["began"].split()[-1]) >= 200 and x["kind"] == "regression" for x in found)
    assert ", detections 3," in out


def test_status_the_command_and_the_report_show_it(regressed, tmp_path) -> None:
    _, _, db, _, _ = regressed
    code, out, _ = run_cli("detections", "--db", str(db), "--json")
    assert code == 0
    listed = json.loads(out)
    assert [d["seq"] for d in listed] == [r[0] for r in query(db, "SELECT seq FROM detections ORDER BY seq DESC")]
    code, out, _ = run_cli("status", "--db", str(db))
    assert "detections" in out and "regression of iterations" in out and "synthetic-1 → synthetic-2" in out
    code, _, _ = run_cli("report", "--db", str(db), "--output", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    assert 'id="detections"' in html and "agentledger detections" in html
    assert html.index('id="detections"') < html.index('id="what-changed"')


def test_fed_once_in_any_order_of_processes_and_rebuilt_from_events(regressed, tmp_path) -> None:
    """The same log fed in three goes — an ingest of the first 260, the close-task hook
    (a process of its own) for 261–270, an ingest of the rest — finds exactly what one
    ingest of all 400 found; and a rebuild reproduces the table."""
    gen, _, whole, _, _ = regressed
    log = tmp_path / "gen"
    shutil.copytree(gen.root, log, symlinks=True)
    it_log = log / "repo" / synth.LOG_REL
    aside = tmp_path / "aside"
    aside.mkdir()
    for p in it_log.glob("iter-*"):
        if int(p.name.split(".")[0].split("-")[1]) > 260:
            p.rename(aside / p.name)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(it_log), "--repo", str(log / "repo"), "--db", str(db)]
    assert run_cli("ingest", *args)[0] == 0
    for n in range(261, 271):
        for p in aside.glob(f"iter-{n}.*"):
            p.rename(it_log / p.name)
        r = cli_subprocess("score", str(n), *args)
        assert r.returncode == 0, r.stderr
    for p in aside.iterdir():
        p.rename(it_log / p.name)
    assert run_cli("ingest", *args)[0] == 0
    mine = [r[:2] + r[3:] for r in detections(db)]  # the source names differ (another directory)
    theirs = [r[:2] + r[3:] for r in detections(whole)]
    assert mine == theirs and mine
    assert query(db, "SELECT position FROM detector_checkpoints WHERE feed LIKE 'iterations:%'") == [(400,)]
    before = detections(db)
    assert run_cli("rebuild", "--db", str(db), *args[:4])[0] == 0
    assert detections(db) == before
    assert run_cli("ingest", *args)[0] == 0 and detections(db) == before  # nothing new: nothing fed twice


def test_a_bulk_pass_feeds_the_detectors_as_its_batches_commit(regressed, tmp_path, monkeypatch) -> None:
    """A scoring pass of many batches runs the detectors after each one: the regression
    is recorded before the pass's last scores, and it is what one feed at the end found
    (the whole ingest of the fixture is one batch), with the same saved states."""
    from agentledger.ledger import scoring_pass

    gen, args, whole, _, _ = regressed
    monkeypatch.setattr(scoring_pass, "BATCH", 50)
    db = tmp_path / "l.sqlite"
    assert run_cli("ingest", *args, "--db", str(db))[0] == 0
    assert detections(db) == detections(whole)
    states = "SELECT feed, position, state FROM detector_checkpoints ORDER BY feed"
    assert query(db, states) == query(whole, states)
    last_score = "SELECT max(seq) FROM events WHERE type = 'score.computed'"
    first_found = "SELECT min(seq) FROM events WHERE type = 'regression.detected'"
    assert query(db, first_found)[0][0] < query(db, last_score)[0][0]  # noticed while the pass went on
    assert query(whole, first_found)[0][0] > query(whole, last_score)[0][0]


def test_a_trial_stream_regression_is_found_per_eval_with_the_model_that_changed(tmp_path) -> None:
    results = tmp_path / "vally" / "run-1"
    results.mkdir(parents=True)
    with open(results / "results.jsonl", "wb") as fh:
        for i in range(2100):  # 7 evals, 300 trials each: 150 at 80 %, then 150 at 30 % with another model
            late = i >= 1050
            fh.write(synth.vally_trial_line(i, pass_rate=0.3 if late else 0.8, model="m-2" if late else "m-1"))
    db = tmp_path / "l.sqlite"
    assert run_cli("ingest", "--vally", str(tmp_path / "vally"), "--db", str(db))[0] == 0
    found = [dict(zip(COLUMNS.split(", "), r)) for r in detections(db)]
    assert {d["scope"] for d in found} >= {f"e{k}" for k in range(6)}  # at least 6 of the 7 evals
    assert all(d["kind"] == "regression" and d["metric"] == "pass_rate" and d["feed"] == "trials" for d in found)
    with_model = [d for d in found if any((c["what"], c["from"], c["to"]) == ("model", "m-1", "m-2")
                                          for c in json.loads(d["changed"]))]
    assert len(with_model) >= len(found) - 1


def test_an_annotation_stream_regression_is_found(tmp_path) -> None:
    solved, failed = [], []
    seed = 0
    while len(solved) < 200 or len(failed) < 200:
        text = synth.annotation(f"task-{seed}", seed)
        (solved if "\nscore: 1\n" in text else failed).append(text)
        seed += 1
    pick = random.Random(0)
    d = tmp_path / "ann"
    d.mkdir()
    for k in range(300):  # 85 % solved, then 15 %
        pool = solved if pick.random() < (0.85 if k < 150 else 0.15) else failed
        (d / f"a-{k:04d}.md").write_text(pool.pop())
    db = tmp_path / "l.sqlite"
    assert run_cli("ingest", "--annotations", str(d), "--db", str(db))[0] == 0
    found = [dict(zip(COLUMNS.split(", "), r)) for r in detections(db)]
    assert [(x["kind"], x["feed"], x["metric"]) for x in found] == [("regression", "annotations", "solved")]
    assert 120 <= int(found[0]["began"].rsplit("a-", 1)[1][:4]) <= 160


HOOK = """
import json, sys
doc = json.load(sys.stdin)
with open(sys.argv[1], "a") as fh:
    fh.write(json.dumps(doc) + "\\n")
"""


def _config(tmp_path: Path, gen, command: str, timeout: int = 10) -> Path:
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "l.sqlite"}"\n[detect]\ncommand = {json.dumps(command)}\n'
                   f'timeout_seconds = {timeout}\n[[iteration_logs]]\npath = "{gen.log}"\nrepo = "{gen.repo}"\n')
    return cfg


def test_the_configured_command_hears_each_detection_as_json_on_stdin(tmp_path) -> None:
    gen = synth.generate(tmp_path / "gen", 330, seed=3, regress_at=250)
    (tmp_path / "hook.py").write_text(HOOK)
    out = tmp_path / "heard.jsonl"
    cfg = _config(tmp_path, gen, f"{sys.executable} {tmp_path / 'hook.py'} {out}")
    r = cli_subprocess("--config", str(cfg), "ingest")
    assert r.returncode == 0, r.stderr
    heard = [json.loads(line) for line in out.read_text().splitlines()]
    stored = query(tmp_path / "l.sqlite", "SELECT seq, type, payload FROM events WHERE type LIKE '%.detected'"
                                          " ORDER BY seq")
    assert [(h["seq"], h["type"]) for h in heard] == [(s, t) for s, t, _ in stored] and heard
    for h, (_, _, payload) in zip(heard, stored):
        assert {k: h[k] for k in json.loads(payload)} == json.loads(payload)


def test_the_command_is_never_a_shell_and_never_outlives_its_timeout(tmp_path) -> None:
    """Attack: a model name that is a shell command, in the data the hook is handed;
    and a hook that hangs after starting a child of its own. Nothing runs the model
    name; the ingest ends, says why the hook failed in one line, and leaves no process."""
    gen = synth.generate(tmp_path / "gen", 330, seed=3, regress_at=250)
    pwned = tmp_path / "pwned"
    for p in gen.log.glob("iter-*.yaml"):
        text = p.read_text().replace("model: synthetic-2", "model: \"m\\nagentledger: WARNING: forged\\x1b[2J"
                                                           f" $(touch {pwned}); `touch {pwned}`\"")
        p.write_text(text)
    marker = f"HOOK_MARKER=agentledger-hook-{os.getpid()}-{random.getrandbits(32):x}"
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\ncat > {tmp_path / 'got.json'}\nsleep 300 &\nexec sleep 301\n")
    script.chmod(0o755)
    cfg = _config(tmp_path, gen, str(script), timeout=1)
    r = cli_subprocess("--config", str(cfg), "ingest", timeout=120, env=dict([marker.split("=")]))
    assert r.returncode == 0, r.stderr
    assert "[detect] command" in r.stderr and "did not finish within 1 s" in r.stderr
    doc = json.loads((tmp_path / "got.json").read_text())
    assert pwned.name in json.dumps(doc) and not pwned.exists()  # handed over as data, never run
    # and said as data: no forged log line, no escape sequence reaches a terminal
    assert "\x1b" not in r.stderr and not any(line.startswith("agentledger: WARNING: forged")
                                              for line in r.stderr.splitlines())
    listed = cli_subprocess("detections", "--config", str(cfg))
    assert listed.returncode == 0 and "regression of iterations" in listed.stdout
    assert "\x1b" not in listed.stdout and "\nagentledger" not in listed.stdout
    kept = json.loads(cli_subprocess("detections", "--json", "--config", str(cfg)).stdout)  # the data stays whole
    assert any(c["to"].startswith("m\nagentledger: WARNING: forged\x1b[2J $(touch") for d in kept
               for c in d["changed"])
    assert "m\\x0aagentledger: WARNING: forged\\x1b[2J" in r.stderr + listed.stdout  # escaped, not dropped

    def marked() -> list[str]:  # every process the ingest started carries the marker in its environment
        out = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if marker.encode() in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                    out.append(pid)
            except OSError:
                pass
        return out
    wait_until(lambda: not marked(), 10)  # both sleeps went with the hook's process group


def test_a_command_that_cannot_start_is_one_line_and_the_ingest_completes(tmp_path) -> None:
    gen = synth.generate(tmp_path / "gen", 330, seed=3, regress_at=250)
    cfg = _config(tmp_path, gen, f"{tmp_path / 'no-such-notifier'} --now")
    r = cli_subprocess("--config", str(cfg), "ingest")
    assert r.returncode == 0
    assert "cannot start" in r.stderr and "Traceback" not in r.stderr
    assert query(tmp_path / "l.sqlite", "SELECT count(*) FROM detections")[0][0] >= 1


def test_the_running_service_notices_a_regression_as_iterations_close(tmp_path) -> None:
    """The daemon, watching a log of 240 good iterations, is handed 90 more closed one
    by one, worse from 250 on: it finds the regression while they arrive, logs it, and
    hands it to the configured command."""
    from tests.test_daemon import running

    gen = synth.generate(tmp_path / "gen", 330, seed=3, regress_at=250)
    later = tmp_path / "later"
    later.mkdir()
    for p in gen.log.glob("iter-*"):
        if int(p.name.split(".")[0].split("-")[1]) > 240:
            p.rename(later / p.name)
    (tmp_path / "hook.py").write_text(HOOK)
    heard = tmp_path / "heard.jsonl"
    cfg = _config(tmp_path, gen, f"{sys.executable} {tmp_path / 'hook.py'} {heard}")
    with running(tmp_path, cfg) as (_, notify):
        notify.wait_for("READY=1", timeout=60)
        assert not heard.exists()  # 240 stationary iterations: nothing to say
        for n in range(241, 331):
            for p in sorted(later.glob(f"iter-{n}.*"), key=lambda p: p.name == f"iter-{n}.yaml"):
                os.replace(p, gen.log / p.name)  # the record last, as an agent closes it
            if n % 10 == 0:  # the service keeps up as they come
                assert wait_until(lambda n=n: query(tmp_path / "l.sqlite", "SELECT position FROM"
                                                    " detector_checkpoints WHERE feed LIKE 'iterations:%'") == [(n,)], 30)

        def found() -> list[dict]:
            docs = [json.loads(line) for line in heard.read_text().splitlines()] if heard.exists() else []
            return [d for d in docs if d["metric"] == "score"]
        assert wait_until(found, 30), (tmp_path / "daemon.log").read_text()[-3000:]
    d = found()[0]
    assert d["type"] == "regression.detected" and 240 <= d["began"]["position"] <= 275
    assert any(c["what"] == "model" and c["to"] == "synthetic-2" and c["at"] == "iteration 250" for c in d["changed"])
    assert "regression" in (tmp_path / "daemon.log").read_text()
    # what the service noticed as they came is what one ingest of the whole log finds
    assert run_cli("ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
                   "--db", str(tmp_path / "whole.sqlite"))[0] == 0
    assert [r[:2] + r[3:] for r in detections(tmp_path / "l.sqlite")] == \
        [r[:2] + r[3:] for r in detections(tmp_path / "whole.sqlite")]


def test_the_signals_column_is_each_payloads_present_sub_scores_however_it_was_made(regressed, tmp_path) -> None:
    """The detectors read each score's sub-scores from ``scores.signals``: written by the
    scoring workers, by a rebuild from the payload, or by migration 0022 in SQL for a
    ledger projected before it, the text is the same."""
    from agentledger.store.scores import signals_of

    _, _, whole, _, _ = regressed
    db = tmp_path / "l.sqlite"
    shutil.copy(whole, db)
    made = query(db, "SELECT s.seq, s.signals, e.payload FROM scores s JOIN events e ON e.seq = s.seq ORDER BY s.seq")
    assert len(made) == 400
    assert all(signals == signals_of(json.loads(payload)["breakdown"]) for _, signals, payload in made)
    values = [json.loads(r[1]) for r in made]
    assert {v for d in values for v in d.values()} - {0.0, 1.0}  # not only whole sub-scores
    assert len({tuple(d) for d in values}) > 1  # an absent signal is left out
    with sqlite3.connect(db) as c:  # as a ledger written before migration 22 holds it
        c.execute("ALTER TABLE scores DROP COLUMN signals")
        c.execute("DELETE FROM _sqlite_migrations WHERE name = '0022_score_signals'")
        c.execute("PRAGMA user_version = 21")
    code, out, err = run_cli("query", "SELECT seq, signals FROM scores ORDER BY seq", "--json", "--db", str(db))
    assert code == 0, err
    assert [(r["seq"], r["signals"]) for r in json.loads(out)] == [r[:2] for r in made]
