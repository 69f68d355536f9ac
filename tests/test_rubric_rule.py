"""Which rubric is active, and sidecars that always equal what `rebuild` would write.

The rule (README, "Rubric versions"): ``--rubric X`` on a command that scores
activates X and it stays; the configured rubric activates when the configured
value itself changes (or nothing is active yet); `rebuild` never activates.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from agentledger.example import synth

from tests.conftest import run_cli

RUBRICS = ("2.1.0", "3.0.0", "2.0.2")


def _setup(tmp_path: Path, n: int = 30):
    gen = synth.generate(tmp_path / "gen", n, seed=11)
    cfg = tmp_path / "agentledger.toml"
    db = tmp_path / "ledger.sqlite"

    def configure(rubric: str) -> None:
        cfg.write_text(f'[store]\npath = "{db}"\n\n[scoring]\nrubric = "{rubric}"\n\n'
                       f'[[iteration_logs]]\npath = "{gen.log}"\nrepo = "{gen.repo}"\n')

    configure("2.1.0")
    return gen, cfg, db, configure


def _cli(cfg: Path, *args: str) -> tuple[int, str, str]:
    return run_cli("--config", str(cfg), *args)


def expected_sidecars(db: Path, tmp_path: Path) -> tuple[str | None, dict[str, bytes]]:
    """What a fresh `rebuild` of a copy of the ledger holds: the active rubric and the
    bytes of every sidecar under it (file name -> bytes)."""
    from agentledger.store.db import connect
    from agentledger.store.events import upcast
    from agentledger.store.projections import rebuild, render_score_payload, session_document

    copy = tmp_path / "fresh.sqlite"
    copy.unlink(missing_ok=True)
    src = sqlite3.connect(db)
    dst = sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    conn = connect(copy, create=False)
    try:
        rebuild(conn)
        row = conn.execute("SELECT value FROM ledger_state WHERE key = 'active_rubric'").fetchone()
        active = row[0] if row else None
        out: dict[str, bytes] = {}
        for r in conn.execute("SELECT s.sidecar, e.type, e.schema_version, e.payload FROM scores s"
                              " JOIN events e ON e.seq = s.seq WHERE s.rubric_version = ?", (active,)):
            out[r["sidecar"]] = render_score_payload(upcast(r["type"], r["schema_version"], json.loads(r["payload"])))
        for r in conn.execute("SELECT source, session_id, sidecar FROM sessions WHERE rubric_version = ?"
                              " AND sidecar IS NOT NULL", (active,)).fetchall():
            data = session_document(conn, r["source"], r["session_id"], active)
            if data is not None:
                out[r["sidecar"]] = data
    finally:
        conn.close()
        copy.unlink()
        for extra in (copy.with_name(copy.name + "-wal"), copy.with_name(copy.name + "-shm")):
            extra.unlink(missing_ok=True)
    return active, out


def on_disk(log: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in log.glob("*.score.yaml")}


def test_a_sidecar_reported_unchanged_holds_the_ledgers_bytes(tmp_path: Path) -> None:
    """The reported sequence: 2.1.0, --rubric 3.0.0, plain, --rubric 3.0.0 score 5."""
    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    code, _, err = _cli(cfg, "--rubric", "3.0.0", "ingest")
    assert code == 0 and "rubric 2.1.0 -> 3.0.0 (explicit): rescoring 30 iterations" in err
    code, out, err = _cli(cfg, "ingest")
    assert code == 0 and "rubric 3.0.0" in out and "->" not in err  # the explicit activation stays
    code, out, _ = _cli(cfg, "--rubric", "3.0.0", "score", "5")
    assert code == 0 and "(rubric 3.0.0)" in out
    assert "rubric_version: 3.0.0" in (gen.log / "iter-5.score.yaml").read_text()
    active, want = expected_sidecars(db, tmp_path)
    assert active == "3.0.0" and on_disk(gen.log) == want


def test_a_backfill_counts_and_rescores_the_configured_sources_only(tmp_path: Path) -> None:
    """A ledger that still holds a source no longer configured (a log directory moved, or
    dropped from the configuration) keeps that source's scores: the backfill's
    announcement, its progress and its recorded count are the configured sources'."""
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen, cfg, db, _ = _setup(tmp_path)
    old = synth.generate(tmp_path / "old", 20, seed=12)
    other = make_source(str(old.log), str(old.repo))
    led = Ledger(Config(store=StoreConfig(path=db), iteration_logs=(other,)))
    try:
        led.scan_all()
    finally:
        led.close()
    assert _cli(cfg, "ingest")[0] == 0
    code, _, err = _cli(cfg, "--rubric", "3.0.0", "backfill")
    assert code == 0 and "rubric 2.1.0 -> 3.0.0 (explicit): rescoring 30 iterations" in err, err
    with sqlite3.connect(db) as c:
        started = json.loads(c.execute("SELECT payload FROM events WHERE type = 'backfill.started'").fetchone()[0])
        counts = dict(c.execute("SELECT source, count(*) FROM scores WHERE rubric_version = '3.0.0' GROUP BY 1"))
    assert started["iterations"] == 30 and counts == {make_source(str(gen.log), str(gen.repo)).id: 30}

    seen: list[tuple[int, int]] = []
    led = Ledger(Config(store=StoreConfig(path=db), iteration_logs=(make_source(str(gen.log), str(gen.repo)),),
                        explicit_rubric="2.0.2"))
    try:
        led.ensure_rubric(progress=lambda done, total: seen.append((done, total)))
    finally:
        led.close()
    assert seen and seen[-1] == (30, 30)


def test_switching_back_to_a_rubric_the_ledger_already_scored_rewrites_every_sidecar(tmp_path: Path) -> None:
    """Scores under 3.0.0 stay in the ledger after a switch back to 2.1.0; switching to
    3.0.0 again computes nothing new, and must still bring every file back to 3.0.0."""
    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "2.1.0")[0] == 0
    assert all(b"rubric_version: 2.1.0" in b for b in on_disk(gen.log).values())
    code, out, err = _cli(cfg, "--rubric", "3.0.0", "score", "5")
    assert code == 0, err
    assert "rubric 2.1.0 -> 3.0.0 (explicit)" in err
    active, want = expected_sidecars(db, tmp_path)
    assert active == "3.0.0" and on_disk(gen.log) == want
    assert all(b"rubric_version: 3.0.0" in b for b in on_disk(gen.log).values())


def test_a_switch_back_writes_the_bytes_the_ledger_kept_and_renders_only_those_it_did_not(
        tmp_path: Path, monkeypatch) -> None:
    """A switch back writes each sidecar from the bytes kept with its score
    (``score_sidecars``): no payload is decoded or rendered. A score with no such row (a
    ledger projected before the table existed) is rendered from its event. Either way the
    files end as a fresh rebuild renders them, and the kept bytes are a rebuild's."""
    from agentledger.ledger import sidecar_sync

    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    conn = sqlite3.connect(db)
    kept = dict(conn.execute("SELECT iteration, bytes FROM score_sidecars WHERE rubric_version = '2.1.0'"))
    assert len(kept) == 30
    with conn:
        conn.execute("DELETE FROM score_sidecars WHERE rubric_version = '2.1.0' AND iteration % 3 = 0")
    conn.close()
    rendered = []
    real = sidecar_sync.render_stored
    monkeypatch.setattr(sidecar_sync, "render_stored", lambda job: rendered.append(len(job) > 2) or real(job))
    code, _, err = _cli(cfg, "backfill", "--rubric", "2.1.0")
    assert code == 0, err
    assert sum(rendered) == 10 and len(rendered) == 30  # only the ten without a row were rendered
    active, want = expected_sidecars(db, tmp_path)
    assert active == "2.1.0" and on_disk(gen.log) == want
    assert all(want[f"iter-{it}.score.yaml"] == data for it, data in kept.items())


@pytest.mark.parametrize("in_workers", [False, True], ids=["here", "in-workers"])
def test_a_switch_back_writes_the_session_bytes_the_ledger_kept(tmp_path: Path, monkeypatch, in_workers) -> None:
    """Session sidecars too are written from the bytes kept when their session was last
    recomputed under the rubric (``session_sidecars``), here or by the worker processes
    with the score sidecars; only a session with no kept bytes (projected before the table
    existed) is read and rendered here. The files end as a fresh rebuild renders them, the
    report counts each kind, and a rebuild keeps the same bytes."""
    from agentledger.ledger import sidecar_sync
    from agentledger.process import parallel

    if in_workers:
        if parallel.workers() < 2:
            pytest.skip("one core: no worker processes")
        monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "8")  # the pool writes them, as at 10,000
    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    conn = sqlite3.connect(db)
    kept = dict(conn.execute("SELECT session_id, bytes FROM session_sidecars WHERE rubric_version = '2.1.0'"))
    sessions = [r[0] for r in conn.execute("SELECT session_id FROM sessions WHERE rubric_version = '2.1.0'"
                                           " ORDER BY session_id")]
    assert len(sessions) >= 3 and sorted(kept) == sessions
    dropped = sessions[::3]
    with conn:
        conn.executemany("DELETE FROM session_sidecars WHERE rubric_version = '2.1.0' AND session_id = ?",
                         [(s,) for s in dropped])
    conn.close()
    rendered = []
    real = sidecar_sync.session_document
    monkeypatch.setattr(sidecar_sync, "session_document", lambda c, src, sid, *a: rendered.append(sid) or real(c, src, sid, *a))
    code, out, err = _cli(cfg, "backfill", "--rubric", "2.1.0", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert (report["sidecars_written"], report["sessions_written"]) == (30, len(sessions)), report
    assert sorted(rendered) == dropped  # the others' bytes were the ledger's
    active, want = expected_sidecars(db, tmp_path)
    assert active == "2.1.0" and on_disk(gen.log) == want
    assert all(want[f"session-{sid}.score.yaml"] == data for sid, data in kept.items())
    conn = sqlite3.connect(db)
    with conn:  # what a rebuild keeps is what the switch wrote
        conn.execute("DELETE FROM session_sidecars")
    conn.close()
    assert _cli(cfg, "rebuild")[0] == 0
    conn = sqlite3.connect(db)
    again = dict(conn.execute("SELECT session_id, bytes FROM session_sidecars WHERE rubric_version = '2.1.0'"))
    conn.close()
    assert again == {sid: want[f"session-{sid}.score.yaml"] for sid in sessions}


def test_a_switch_back_in_the_workers_refuses_a_symlink_planted_at_a_session_sidecar(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """A session sidecar written from its kept bytes by a worker (``render_run``) goes
    through the same refusal as every sidecar write: a symlink planted at its path, pointing
    out of the tree, is neither followed nor replaced; the switch completes, says the path
    once (exit status 1, as for any sidecar not written), and writes every other file."""
    from agentledger.process import parallel

    if parallel.workers() < 2:
        pytest.skip("one core: no worker processes")
    monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "8")
    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    target = sorted(gen.log.glob("session-*.score.yaml"))[0]
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    target.unlink()
    target.symlink_to(outside)
    code, out, err = _cli(cfg, "backfill", "--rubric", "2.1.0", "--json")
    assert code == 1 and f"cannot write {target}: not a regular file" in err, err  # said once, the rest done
    assert err.count("cannot write") == 1
    assert outside.read_text() == "keep me\n" and target.is_symlink()
    _, want = expected_sidecars(db, tmp_path)
    disk = on_disk(gen.log)
    assert {k: v for k, v in disk.items() if k != target.name} == {k: v for k, v in want.items() if k != target.name}


def test_a_switch_back_scores_only_what_changed_meanwhile_and_ends_as_a_ledger_that_never_left(
        tmp_path: Path) -> None:
    """Switching back reuses the scores whose inputs did not move (their inputs key
    equals the one under the rubric switched away from); what changed while the other
    rubric was active, and what the same command ingests, is scored again."""
    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0

    def edit(i: int) -> None:
        p = gen.log / f"iter-{i}.yaml"
        text = p.read_text()
        assert "focused_tests_pass: true" in text
        p.write_text(text.replace("focused_tests_pass: true", "focused_tests_pass: false", 1))

    edit(7)  # scored under 3.0.0 only
    synth.add_iteration(gen, 31)  # a new commit on the trunk and its iteration
    assert _cli(cfg, "ingest")[0] == 0
    edit(12)  # queued by the very command that switches back
    code, out, err = _cli(cfg, "--rubric", "2.1.0", "ingest", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert 3 <= report["scored"] <= 6, report  # 7, 12, 31 (and windows they start)
    assert report["scored"] + report["unchanged"] <= 8, report  # what was gathered: not all 31
    assert report["sidecars_written"] == 31
    active, want = expected_sidecars(db, tmp_path)
    assert active == "2.1.0" and on_disk(gen.log) == want
    # a ledger that scored these files under 2.1.0 only finds every sidecar already right
    fresh = tmp_path / "fresh.toml"
    fresh.write_text(cfg.read_text().replace(str(db), str(tmp_path / "never-left.sqlite")))
    code, out, err = _cli(fresh, "ingest", "--json")
    assert code == 0, err
    again = json.loads(out)
    assert (again["scored"], again["sidecars_written"], again["sessions_written"]) == (31, 0, 0), again


def test_a_configured_rubric_activates_when_the_configured_value_changes(tmp_path: Path) -> None:
    gen, cfg, db, configure = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    code, out, err = _cli(cfg, "status")
    assert "3.0.0 (activated with --rubric; configured: 2.1.0" in out
    assert _cli(cfg, "ingest")[0] == 0
    assert expected_sidecars(db, tmp_path)[0] == "3.0.0"
    configure("2.0.2")
    code, _, err = _cli(cfg, "ingest")
    assert code == 0 and "rubric 3.0.0 -> 2.0.2 (configured): rescoring 30 iterations" in err
    active, want = expected_sidecars(db, tmp_path)
    assert active == "2.0.2" and on_disk(gen.log) == want


def test_rebuild_refuses_a_rubric_flag(tmp_path: Path) -> None:
    _, cfg, _, _ = _setup(tmp_path, 5)
    assert _cli(cfg, "ingest")[0] == 0
    code, _, err = _cli(cfg, "--rubric", "3.0.0", "rebuild")
    assert code == 2 and "backfill --rubric" in err


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_command_sequences_keep_sidecars_equal_to_a_fresh_rebuild(tmp_path: Path, seed: int) -> None:
    """Random ingest / score / backfill / rebuild steps with random --rubric flags and
    configuration edits. After each: the files equal a fresh rebuild's, and the active
    rubric is the one the documented rule names (a model of the rule, kept here)."""
    rng = random.Random(seed)
    gen, cfg, db, configure = _setup(tmp_path, 12)
    configured, active, seen = "2.1.0", None, None
    for step in range(10):
        if rng.random() < 0.25:
            configured = rng.choice(RUBRICS)
            configure(configured)
        command = rng.choice(("ingest", "score", "backfill", "rebuild"))
        flag = rng.choice((None, None, *RUBRICS))
        args = (["--rubric", flag] if flag else []) + [command] + (["5"] if command == "score" else [])
        code, out, err = _cli(cfg, *args)
        if command == "rebuild":
            assert code == (2 if flag else 0), (args, err)
        else:
            assert code == 0, (args, err)
            if flag:
                active = flag
            elif active is None or seen != configured:
                active = configured
            seen = configured
        if active is None:
            continue
        have, want = expected_sidecars(db, tmp_path)
        assert have == active, (step, args)
        assert on_disk(gen.log) == want, (step, args)


def latest_rubrics(db: Path) -> set[str]:
    with sqlite3.connect(db) as c:
        return {r[0] for r in c.execute("SELECT rubric_version FROM latest_scores")}


def test_a_round_trip_of_rubrics_leaves_one_active_rubric_everywhere(tmp_path: Path) -> None:
    """ingest --rubric 3.0.0; backfill --rubric 2.1.0; backfill --rubric 3.0.0: status,
    every sidecar and latest_scores all say 3.0.0 (latest_scores said 2.1.0: it took
    the newest row across rubrics, and the second 3.0.0 pass appended none)."""
    gen, cfg, db, _ = _setup(tmp_path)
    for rubric, cmd in (("3.0.0", "ingest"), ("2.1.0", "backfill"), ("3.0.0", "backfill")):
        code, _, err = _cli(cfg, cmd, "--rubric", rubric)
        assert code == 0, err
        assert latest_rubrics(db) == {rubric}
        active, want = expected_sidecars(db, tmp_path)
        assert active == rubric and on_disk(gen.log) == want
    code, out, _ = _cli(cfg, "status")
    assert code == 0 and "3.0.0" in out
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM latest_scores").fetchone()[0] == 30


def test_concurrent_activations_serialise_and_the_last_one_wins_everywhere(tmp_path: Path) -> None:
    """Ten hooks at once, alternating --rubric: once they are all done, the active
    rubric is the one activated last, and every sidecar and latest_scores are its."""
    import os
    import subprocess
    import sys

    gen, cfg, db, _ = _setup(tmp_path, n=40)
    assert _cli(cfg, "ingest")[0] == 0
    procs = [subprocess.Popen([sys.executable, "-m", "agentledger", "--config", str(cfg), "score", str(k + 1),
                               "--rubric", ("3.0.0", "2.1.0")[k % 2], "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for k in range(10)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with sqlite3.connect(db) as c:
        last = c.execute("SELECT json_extract(payload, '$.version') FROM events WHERE type = 'rubric.activated'"
                         " ORDER BY seq DESC LIMIT 1").fetchone()[0]
        active = c.execute("SELECT value FROM ledger_state WHERE key = 'active_rubric'").fetchone()[0]
    assert active == last and latest_rubrics(db) == {last}
    disk = on_disk(gen.log)
    assert len(disk) >= 40 and all(f"rubric_version: {last}".encode() in b for b in disk.values())
    assert expected_sidecars(db, tmp_path) == (last, disk)


def test_a_switch_back_never_reuses_a_score_that_came_in_by_import(tmp_path: Path) -> None:
    """The attack on the reuse: after an iteration's inputs changed, an import brings back
    its old score under the rubric being left, whose inputs key matches the stale score
    under the rubric being switched to. Reusing on that match would write the stale
    sidecar. An import now restores into an empty ledger only, so the attack is refused
    at the door, whole (a ledger that holds events takes no new event from an import),
    and the switch back writes only current sidecars."""
    gen, cfg, db, _ = _setup(tmp_path)
    assert _cli(cfg, "ingest")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    assert _cli(cfg, "backfill", "--rubric", "2.1.0")[0] == 0
    code, out, _ = _cli(cfg, "export", "--type", "score.computed")
    old = [json.loads(line) for line in out.splitlines()]
    old = next(e for e in old if e["payload"]["iteration"] == 7 and e["payload"]["rubric_version"] == "2.1.0")
    p = gen.log / "iter-7.yaml"
    p.write_text(p.read_text().replace("focused_tests_pass: true", "focused_tests_pass: false", 1))
    assert _cli(cfg, "ingest")[0] == 0  # scored again under 2.1.0: a new inputs key
    forged = tmp_path / "forged.jsonl"
    forged.write_text(json.dumps({**old, "idempotency_key": old["idempotency_key"] + "-again"}) + "\n")
    forged.write_text(json.dumps({**old, "seq": 1, "idempotency_key": old["idempotency_key"] + "-again"}) + "\n")
    with sqlite3.connect(db) as c:
        before = c.execute("SELECT count(*) FROM events").fetchone()[0]
    code, _, err = _cli(cfg, "import", str(forged))
    assert code == 1 and "holds events already" in err and "nothing was imported" in err, err
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM events").fetchone()[0] == before
    assert _cli(cfg, "backfill", "--rubric", "3.0.0")[0] == 0
    fresh = tmp_path / "fresh.toml"
    fresh.write_text(cfg.read_text().replace(str(db), str(tmp_path / "never-left.sqlite"))
                     .replace('rubric = "2.1.0"', 'rubric = "3.0.0"'))
    code, out, err = _cli(fresh, "ingest", "--json")
    assert code == 0, err
    again = json.loads(out)
    assert (again["sidecars_written"], again["sessions_written"]) == (0, 0), again  # iter-7's is current
