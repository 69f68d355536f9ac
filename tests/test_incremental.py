"""Rescoring only what a change can affect gives the same ledger as rescoring everything."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from agentledger.example import synth

from .conftest import GIT_ENV, query, run_cli, threads_named, wait_until


def scores(db: Path) -> set[tuple]:
    with sqlite3.connect(db) as c:
        return set(c.execute("SELECT source, iteration, rubric_version, inputs_hash, value, band FROM scores"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def test_targeted_rescoring_equals_full_pass(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 60, seed=3)
    transcripts = tmp_path / "claude"
    transcripts.mkdir()
    t0 = 1_760_000_000
    lines = [json.dumps({"type": "assistant", "timestamp": _iso(t0 + 60 * i - 20), "message": {"usage": {
        "input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 10 * i, "cache_creation_input_tokens": 5}}})
        for i in range(5, 40, 3)]
    (transcripts / "s.jsonl").write_text("\n".join(lines) + "\n")
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--transcripts", str(transcripts)]
    fast, full = tmp_path / "targeted.sqlite", tmp_path / "full.sqlite"
    reports = []

    def step() -> None:
        code, out, err = run_cli("ingest", "--once", "--json", *common, "--db", str(fast))
        assert code == 0, err
        reports.append(json.loads(out))
        assert run_cli("ingest", "--once", "--rescore-all", *common, "--db", str(full))[0] == 0
        assert scores(fast) == scores(full)

    step()
    first = reports[-1]["scored"]
    # a record changes
    p = gen.log / "iter-20.yaml"
    p.write_text(p.read_text().replace("retries:", "retries: 3\n  old_retries:", 1))
    step()
    assert 0 < reports[-1]["scored"] < first / 4
    # a verification artifact a record points at flips
    art = gen.repo / ".agents/active/verification/task-14/test.result.yaml"
    art.write_text("schema_version: 1\nstatus: fail\n" if "pass" in art.read_text() else "status: pass\n")
    step()
    # a plan's write scope changes
    tasks = gen.repo / ".agents/workflow/plans/plan-1/TASKS.yaml"
    before = tasks.read_text()
    tasks.write_text(before.replace('"src/core/"', '"src/"'))
    assert tasks.read_text() != before
    step()
    assert reports[-1]["scored"] > 0
    # transcript lines land in some windows
    with (transcripts / "s.jsonl").open("a") as fh:
        fh.write(json.dumps({"type": "user", "timestamp": _iso(t0 + 60 * 33 - 10), "message": {"content": [
            {"type": "tool_result", "is_error": True}]}}) + "\n")
    step()
    assert 0 < reports[-1]["scored"] <= 3
    # the trunk moves: the side branch lands, then an old commit is reverted
    git(gen.repo, "merge", "-q", "--no-ff", "-m", "land side", "side")
    step()
    victim = git(gen.repo, "log", "--format=%H", "--grep", "^iter 12:")
    git(gen.repo, "revert", "--no-edit", victim)
    step()
    # hook outcomes arrive for an iteration; then one iteration's file is removed
    (gen.log / "iter-41.hook-outcomes.yaml").write_text(synth.hook_sidecar(41, __import__("random").Random(9)))
    step()
    (gen.log / "iter-50.yaml").unlink()
    step()
    # nothing changed: nothing rescored
    step()
    assert reports[-1]["scored"] == 0 and reports[-1]["events"] == 0


def _iso(t: int) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_a_change_notification_looks_only_at_what_it_changed(tmp_path: Path) -> None:
    """After a full scan (which touches every iteration), a hint naming one new record
    works on that record alone; the scan's set of touched iterations is not carried over."""
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 30)
    src = make_source(str(gen.log), str(gen.repo))
    led = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(src,)))
    led.scan_all()
    assert len({it for _, it in led.touched.iterations}) >= 30
    synth.add_iteration(gen, 31)
    report = led.ingest_hint(src, {"iter-31.yaml"}, set())
    assert report.events >= 1
    assert led.touched.iterations == {(src.id, 31)}
    led.rescore(src)
    assert (gen.log / "iter-31.score.yaml").is_file()
    led.close()


def _daemon_ledger(tmp_path: Path):
    """A 60-iteration log and a ledger with the daemon's background writes, after its first scan."""
    from agentledger.config import Config, IterationLogSource, StoreConfig
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 60, seed=3)
    cfg = Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(IterationLogSource(gen.log, gen.repo),))
    led = Ledger(cfg, background_writes=True)
    led.scan_all()
    return gen, cfg.iteration_logs[0], led


def _retry_thirty(gen) -> dict[int, str]:
    """Change the score of iterations 10-39 (a pass large enough for the writer thread); their old texts."""
    original = {n: (gen.log / f"iter-{n}.yaml").read_text() for n in range(10, 40)}
    for n in original:
        (gen.log / f"iter-{n}.yaml").write_text(original[n].replace("retries:", "retries: 4\n  old_retries:", 1))
    return original


def _sync_from_fresh_ledger(tmp_path: Path, src):
    """What a new ledger on the same store finds to write: nothing when the disk is the ledger's."""
    from agentledger.config import Config, StoreConfig
    from agentledger.ledger import Ledger

    fresh = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(src,)))
    try:
        return fresh.sync_sidecars(src)
    finally:
        fresh.close()


def test_background_writes_land_in_order_and_are_counted(tmp_path: Path) -> None:
    """The daemon's ledger hands large passes' sidecars to a writer thread: a
    small pass right after (written directly) must not be overtaken by the
    queued writes of the same files, and every landed write is reported."""
    gen, src, led = _daemon_ledger(tmp_path)
    led.collect_writes()
    original = _retry_thirty(gen)
    led.ingest(src)
    big = led.rescore(src)
    assert big.scored >= 30 and big.sidecars_written == 0  # queued, not yet counted
    (tmp_path / "scratch").mkdir()
    for k in range(1500):  # a backlog the small pass has to wait for
        led.sidecars.writer.submit(tmp_path / "scratch" / f"{k}.yaml", b"x\n", False)
    (gen.log / "iter-20.yaml").write_text(original[20])
    led.ingest(src)
    small = led.rescore(src)
    assert small.scored >= 1 and small.sidecars_written >= 1  # written before returning...
    assert led.collect_writes().sidecars_written == big.scored + 1500  # ...after everything queued before
    led.close()
    check = _sync_from_fresh_ledger(tmp_path, src)  # the files on disk are exactly the ledger's
    assert (check.sidecars_written, check.sessions_written, check.errors) == (0, 0, [])


def test_a_queued_write_never_lands_over_a_newer_file_from_another_process(tmp_path: Path) -> None:
    """The daemon's writer thread holds an older sidecar while the close-task hook
    (another connection, as another process) scores the same iteration again and
    writes it directly: the queued write is skipped, not landed over the newer file."""
    import threading

    from agentledger.config import Config, StoreConfig
    from agentledger.ledger import Ledger

    gen, src, daemon = _daemon_ledger(tmp_path)
    writer = daemon.sidecars.writer
    write_run = writer._write
    hook_done = threading.Event()

    def held(items):
        """The writer thread holds the run with iteration 20's older sidecar, queued, not
        under the sidecar lock, until the hook has scored it again and written its file
        (an event, not a timeout); then writes the run as it would have."""
        if any(it[4] is not None and it[4][0] == "scores" and it[4][2] == 20 for it in items):
            assert hook_done.wait(120)
        write_run(items)

    writer._write = held
    original = _retry_thirty(gen)
    daemon.ingest(src)
    assert daemon.rescore(src).scored >= 30  # queued, held
    hook = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(src,)))
    (gen.log / "iter-20.yaml").write_text(original[20])
    hook.ingest(src)
    assert hook.score(src, [20]).scored == 1  # back to the original score (and its file's bytes)
    newest = (gen.log / "iter-20.score.yaml").read_bytes()
    hook_done.set()
    hook.close()
    daemon.close()
    assert (gen.log / "iter-20.score.yaml").read_bytes() == newest
    assert daemon.sidecars.writer.superseded >= 1
    check_ = _sync_from_fresh_ledger(tmp_path, src)
    assert (check_.sidecars_written, check_.sessions_written) == (0, 0)


def test_a_scan_with_nothing_changed_reads_nothing_and_misses_no_edit(tmp_path: Path) -> None:
    """A full scan compares stats, not contents, with what it last read: a second ingest
    reads no file. Yet an edit in place that keeps the size — of a record, of a
    verification artifact, of a sidecar by hand — changes the stat, and is found."""
    gen = synth.generate(tmp_path / "gen", 40, seed=4)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "--json"]
    assert run_cli("ingest", *args)[0] == 0
    code, out, _ = run_cli("ingest", *args)
    again = json.loads(out)
    assert code == 0 and again["files_read"] == 0 and again["events"] == 0 and again["sidecars_written"] == 0
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM sidecar_seen").fetchone()[0] >= 40  # each read once, found right

    record = gen.log / "iter-12.yaml"
    text = record.read_text()
    edited = text.replace("scope_note: on-target", "scope_note: off-target") if "on-target" in text else \
        text.replace("retries: 0", "retries: 9", 1)
    assert edited != text and len(edited) == len(text)
    artifact = next((gen.repo / ".agents/active/verification").glob("task-*/test.result.yaml"))
    atext = artifact.read_text()
    flipped = atext.replace("status: pass", "status: fail") if "pass" in atext else atext.replace("fail", "pass", 1)
    assert flipped != atext
    sidecar = gen.log / "iter-30.score.yaml"
    stext = sidecar.read_text()
    forged = stext.replace("rubric_version: 2.1.0", "rubric_version: 9.9.9")
    assert len(forged) == len(stext) and forged != stext
    time.sleep(0.01)  # a later mtime than the ledger saw, on any file system's clock
    record.write_text(edited)
    artifact.write_text(flipped)
    sidecar.write_text(forged)
    code, out, _ = run_cli("ingest", *args)
    found = json.loads(out)
    assert code == 0 and found["files_read"] == 2 and found["events"] >= 2
    assert sidecar.read_text() == stext  # the ledger's bytes again


def test_many_candidates_find_their_checkpoints_on_their_side(tmp_path: Path) -> None:
    """Past 500 candidates, the checkpoints are read by side (log files, named in the log
    directory; artifacts and plans, named in the repository) rather than by name: each
    candidate still gets its own, whichever side it is on, or both sides together."""
    from agentledger.sources.iterlogs import files as S

    gen, src, led = _daemon_ledger(tmp_path)
    try:
        logs = S.log_candidates(src, sorted(p.name for p in gen.log.iterdir() if not p.name.endswith(".score.yaml")))
        arts = S.artifact_candidates(src, led.iterlogs.artifact_refs(src, None)) + S.tasks_candidates(src)
        assert len(logs) > 60 and len(arts) > 10
        with sqlite3.connect(tmp_path / "l.sqlite") as c:
            sides = {True: set(), False: set()}
            for path, kind in c.execute("SELECT path, kind FROM source_checkpoints"):
                sides[kind in S.LOG_KINDS].add(path)
        for cands, want in ((logs, sides[True]), (arts, sides[False]), (logs + arts, sides[True] | sides[False])):
            by_name = led.iterlogs._checkpoints(src, cands, [c.rel for c in cands])
            by_side = led.iterlogs._checkpoints(src, cands, None)
            assert set(by_name) == {c.rel for c in cands} and set(by_side) == want
            assert {rel: by_side[rel] for rel in by_name} == by_name
    finally:
        led.close()


def test_a_pass_gathered_in_parts_equals_one_gathered_whole(tmp_path: Path, monkeypatch) -> None:
    """A large pass gathers its inputs a part at a time (memory stays bounded at 100,000
    iterations); each part's transcript windows start where the iteration before it
    ends. The ledger and the sidecars come out as from one gathering of the whole log —
    reverts, commits that do not resolve, a branch that never lands and transcripts
    included."""
    from agentledger.ledger import scoring_pass

    gen = synth.generate(tmp_path / "gen", 60, seed=3)
    transcripts = tmp_path / "claude"
    synth.claude_transcript(transcripts / "s.jsonl", 60)
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--transcripts", str(transcripts)]
    whole, parts = tmp_path / "whole.sqlite", tmp_path / "parts.sqlite"

    def state(db: Path) -> list[tuple]:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT s.iteration, s.rubric_version, s.inputs_hash, s.value, s.band, s.sidecar_sha256,"
                             " json_extract(e.payload, '$.window') FROM scores s JOIN events e ON e.seq = s.seq"
                             " ORDER BY 1, 2").fetchall()

    assert run_cli("ingest", *common, "--db", str(whole))[0] == 0
    sidecars = {p.name: p.read_bytes() for p in gen.log.glob("*.score.yaml")}
    monkeypatch.setattr(scoring_pass, "GATHER_CHUNK", 7)
    monkeypatch.setattr(scoring_pass, "FIRST_PART", 3)  # a short first part, then parts of 7
    assert run_cli("ingest", *common, "--db", str(parts))[0] == 0
    assert state(parts) == state(whole) and len(state(whole)) == 60
    assert sum(w is not None for *_, w in state(whole)) > 40  # windows were chained, not just absent
    assert {p.name: p.read_bytes() for p in gen.log.glob("*.score.yaml")} == sidecars
    monkeypatch.setattr(scoring_pass, "GATHER_CHUNK", 11)  # and a backfill in parts
    monkeypatch.setattr(scoring_pass, "FIRST_PART", 5)
    assert run_cli("backfill", "--rubric", "3.0.0", *common, "--db", str(parts))[0] == 0
    monkeypatch.setattr(scoring_pass, "GATHER_CHUNK", 5000)
    assert run_cli("backfill", "--rubric", "3.0.0", *common, "--db", str(whole))[0] == 0
    assert state(parts) == state(whole)


def test_the_daemons_trunk_index_follows_forward_moves_as_a_full_pass_would(tmp_path: Path) -> None:
    """Between full scans the service checks a forward move of the trunk against an index
    of every iteration's commit, kept up to date, instead of resolving the whole log
    again. A revert of a landed iteration's commit, a side commit fast-forwarded onto the
    trunk and a new iteration, each followed by one targeted pass: the ledger ends equal
    to a fresh ingest of the same repository."""
    from agentledger.config import Config, ScoringConfig, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 40, seed=6)
    src = make_source(gen.log, gen.repo)
    ledger = Ledger(Config(store=StoreConfig(path=tmp_path / "live.sqlite"), scoring=ScoringConfig(),
                           iteration_logs=(src,)))
    try:
        ledger.scan_all()
        assert ledger.rescore(src).scored == 0
        # a first pass takes every iteration and builds no index of their commits: the first
        # move of the trunk builds it from the tables, and the moves after it are checked
        # against it (the cached path, not a full resolve)
        assert src.id not in ledger.planner.facts and src.id in ledger.planner.ends
        full = [it for it in range(5, 40) if len(_commit_of(gen, it)) == 40]
        victim = full[3]
        git(gen.repo, "commit", "--allow-empty", "-q", "-m",
            f'Revert "iter {victim}"\n\nThis reverts commit {_commit_of(gen, victim)}.')
        assert victim in ledger.planner.affected(src)
        assert src.id in ledger.planner.facts
        ledger.rescore(src)
        def close(n: int, commit: str, summary: str) -> None:
            (gen.log / f"iter-{n}.yaml").write_text(
                f"schema_version: 2\niteration: {n}\ntask_id: t0-0\ncommit: {commit}\n"
                f"impl:\n  summary: \"{summary}\"\n  scope_note: on-target\n")
            ledger.ingest_paths([gen.log / f"iter-{n}.yaml"])

        def lands(n: int, *move: list[str]) -> None:
            for args in move:
                git(*args)
            assert n in ledger.planner.affected(src)
            ledger.rescore(src)

        git(gen.repo, "checkout", "-q", "-b", "feature")
        git(gen.repo, "commit", "--allow-empty", "-q", "-m", "feature work")
        side = git(gen.repo, "rev-parse", "HEAD")
        git(gen.repo, "checkout", "-q", "master")
        close(41, side[:12], "feature work")
        lands(41, [gen.repo, "merge", "-q", "--ff-only", "feature"])  # its commit is on the trunk now
        # a commit that resolves nowhere (squashed away), then its summary as a trunk subject
        close(42, "0badc0ffee12", "Squashed Work")
        lands(42, [gen.repo, "commit", "--allow-empty", "-q", "-m", "squashed work"])
        # a commit made elsewhere and named before this repository has it, then pulled in
        other = tmp_path / "other"
        git(tmp_path, "clone", "-q", str(gen.repo), str(other))
        git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--allow-empty", "-q", "-m", "pushed later")
        close(43, git(other, "rev-parse", "HEAD")[:10], "not its subject")
        lands(43, [gen.repo, "pull", "-q", "--ff-only", str(other), "master"])  # its abbreviation resolves
        # a name that names nothing yet, then a tag on a new trunk commit
        close(44, "release-1", "not its subject either")
        lands(44, [gen.repo, "commit", "--allow-empty", "-q", "-m", "release"], [gen.repo, "tag", "release-1"])
    finally:
        ledger.close()
    assert run_cli("ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
                   "--db", str(tmp_path / "fresh.sqlite"))[0] == 0
    assert scores(tmp_path / "live.sqlite") == scores(tmp_path / "fresh.sqlite")


def _commit_of(gen, it: int) -> str:
    import yaml

    return str(yaml.safe_load((gen.log / f"iter-{it}.yaml").read_text()).get("commit") or "")


def test_an_iteration_that_moves_to_another_session_moves_in_both_sessions(tmp_path: Path) -> None:
    """The session an iteration leaves and the one it joins are both recomputed, under
    every rubric it has a score in, as a rebuild from the events derives them."""
    gen = synth.generate(tmp_path / "gen", 30, seed=5)
    db = tmp_path / "l.sqlite"
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    assert run_cli("ingest", *common)[0] == 0
    assert run_cli("backfill", "--rubric", "3.0.0", *common)[0] == 0
    p = gen.log / "iter-10.yaml"
    before = next(line.split(":", 1)[1].strip() for line in p.read_text().splitlines()
                  if line.strip().startswith("session_id:"))
    p.write_text(p.read_text().replace(f"session_id: {before}", "session_id: sess-moved", 1))

    def sessions() -> dict:
        with sqlite3.connect(db) as c:
            return {r[:2]: r[2:] for r in c.execute(
                "SELECT session_id, rubric_version, iterations, value, band, sidecar_sha256 FROM sessions")}

    assert run_cli("ingest", *common)[0] == 0
    incremental = sessions()
    assert 10 in json.loads(incremental[("sess-moved", "3.0.0")][0])
    assert 10 in json.loads(incremental[("sess-moved", "2.1.0")][0])  # its score under the other rubric too
    assert 10 not in json.loads(incremental[(before, "3.0.0")][0])
    assert 10 not in json.loads(incremental[(before, "2.1.0")][0])
    code, out, err = run_cli("rebuild", "--json", *common)
    assert code == 0, err
    assert sessions() == incremental and json.loads(out)["sessions_written"] == 0
    assert b"iteration: 10" in (gen.log / "session-sess-moved.score.yaml").read_bytes()


def test_a_trunk_check_with_nothing_to_do_writes_nothing(tmp_path: Path) -> None:
    """The service checks the trunk every 30 s; an idle one commits nothing for it (a
    commit would also wake the checkpoint thread), and a move is still recorded."""
    from agentledger.config import Config, ScoringConfig, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 20, seed=4)
    src = make_source(gen.log, gen.repo)
    db = tmp_path / "live.sqlite"
    ledger = Ledger(Config(store=StoreConfig(path=db), scoring=ScoringConfig(), iteration_logs=(src,)))
    try:
        ledger.scan_all()
        ledger.rescore(src)
        with sqlite3.connect(db) as other:  # data_version moves for a commit by any other connection
            seen = other.execute("PRAGMA data_version").fetchone()[0]
            changes = ledger.ctx.conn.total_changes
            for _ in range(3):
                assert ledger.rescore(src).scored == 0
            assert ledger.ctx.conn.total_changes == changes
            assert other.execute("PRAGMA data_version").fetchone()[0] == seen
            git(gen.repo, "commit", "--allow-empty", "-q", "-m", "moves the trunk")
            ledger.rescore(src)
            assert other.execute("SELECT trunk_tip FROM git_state").fetchone()[0] == git(gen.repo, "rev-parse", "HEAD")
    finally:
        ledger.close()


def test_the_service_index_follows_what_another_writer_consumed(tmp_path: Path) -> None:
    """An `agentledger ingest` beside the service ingests and scores a new iteration,
    consuming the queue entry the service's index would have learnt it from; a later
    trunk move that lands that iteration's commit still rescores it in the service, as a
    fresh ingest would."""
    from agentledger.config import Config, ScoringConfig, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 30, seed=8)
    src = make_source(gen.log, gen.repo)
    db = tmp_path / "live.sqlite"
    cfg = Config(store=StoreConfig(path=db), scoring=ScoringConfig(), iteration_logs=(src,))
    service = Ledger(cfg)
    try:
        service.scan_all()
        assert service.rescore(src).scored == 0  # builds the index
        git(gen.repo, "checkout", "-q", "-b", "feature")
        git(gen.repo, "commit", "--allow-empty", "-q", "-m", "feature work")
        side = git(gen.repo, "rev-parse", "HEAD")
        git(gen.repo, "checkout", "-q", "master")
        (gen.log / "iter-31.yaml").write_text(f"schema_version: 2\niteration: 31\ntask_id: t0-0\ncommit: {side[:12]}\n"
                                              "impl:\n  summary: \"feature work\"\n  scope_note: on-target\n")
        assert run_cli("ingest", "--once", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
                       "--db", str(db))[0] == 0  # the other writer: ingests, scores, consumes the queue
        service.ingest_paths([gen.log / "iter-31.yaml"])  # the service's notification: nothing new to read
        git(gen.repo, "merge", "-q", "--ff-only", "feature")  # iteration 31's commit lands
        assert 31 in service.planner.affected(src)
        service.rescore(src)
    finally:
        service.close()
    assert run_cli("ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
                   "--db", str(tmp_path / "fresh.sqlite"))[0] == 0
    assert scores(db) == scores(tmp_path / "fresh.sqlite")


def test_a_few_changed_records_resolve_a_few_commits_not_every_iterations(tmp_path: Path) -> None:
    """A one-off pass that finds a few records changed and no trunk move looks up each
    one's successor (the next iteration whose commit resolves: its window starts at the
    changed one's end) without resolving every iteration's commit; the successors are
    those the index of every iteration gives, past unresolvable commits and at the end."""
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger
    from agentledger.ledger.windows import Ends

    gen = synth.generate(tmp_path / "gen", 150, seed=5)
    for n in range(41, 47):  # six records whose commit resolves to nothing
        p = gen.log / f"iter-{n}.yaml"
        p.write_text(p.read_text().replace("\ncommit: ", "\ncommit: 0000000", 1))
    src = make_source(str(gen.log), str(gen.repo))
    led = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(src,)))
    led.scan_all()
    led.close()

    led = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(src,)))  # a new process
    for n in (40, 90, 150):
        p = gen.log / f"iter-{n}.yaml"
        p.write_text(p.read_text().replace("retries:", "retries: 4\n  old_retries:", 1))
    led.ingest(src)
    repo = led.ctx.repo(src)
    asked: list[str] = []
    real = repo.resolve
    repo.resolve = lambda refs, *a, **k: asked.extend(refs) or real(refs, *a, **k)
    affected = led.planner.affected(src)
    assert set(affected) == {40, 47, 90, 91, 150} and len(asked) < 40  # of 150 iterations

    rows = led.conn.execute("SELECT iteration, commit_ref FROM iterations WHERE source = ?", (src.id,)).fetchall()
    res = real([c for _, c in rows])
    from agentledger.ledger.inputs import iso_ns

    index = Ends({it: iso_ns(res[c].commit_time) for it, c in rows})
    for changed in ({40}, {41, 44}, {46}, {45, 100, 149, 150}, {1, 2, 3}, {999}):
        assert led.planner._next_resolving(src, repo, changed) == index.successors(changed), changed

    # every iteration lacks a score under the active rubric (a first backfill to it): the
    # planner takes them all and resolves nothing (the pass resolves each part as it gathers it)
    led.planner._consumed = None
    with led.conn:
        led.conn.execute("DELETE FROM scores")  # (a projection: as if none had been computed)
    asked.clear()
    assert led.planner.affected(src) == sorted(r[0] for r in rows) and asked == []
    led.close()


def test_a_removed_record_moves_the_next_window_back_to_where_the_one_before_ends(tmp_path: Path) -> None:
    """When an iteration's record is removed, the next iteration whose commit resolves now
    has a window from the removed one's predecessor: transcript lines that fell in the
    removed window count for it, and a targeted pass rescores it as a full pass does."""
    gen = synth.generate(tmp_path / "gen", 30, seed=4)
    transcripts = tmp_path / "claude"
    transcripts.mkdir()
    t0 = 1_760_000_000  # synth's commits land at t0 + 60*i
    lines = [json.dumps({"type": "user", "timestamp": _iso(t0 + 60 * n - 20), "message": {"content": [
        {"type": "tool_result", "is_error": error}]}})
        for n, error in ((10, True), (11, False), (20, True), (21, False))]
    (transcripts / "s.jsonl").write_text("\n".join(lines) + "\n")
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--transcripts", str(transcripts)]
    fast, full = tmp_path / "targeted.sqlite", tmp_path / "full.sqlite"
    for db in (fast, full):
        assert run_cli("ingest", "--once", *common, "--db", str(db))[0] == 0
    before = {r[1]: r for r in scores(fast)}
    (gen.log / "iter-20.yaml").unlink()
    code, out, err = run_cli("ingest", "--once", "--json", *common, "--db", str(fast))
    assert code == 0, err
    assert run_cli("ingest", "--once", "--rescore-all", *common, "--db", str(full))[0] == 0
    after = {r[1]: r for r in scores(fast)}
    assert after[21][3] != before[21][3]  # iteration 21's inputs now hold the removed window's line
    assert scores(fast) == scores(full)

    # the same in a process that keeps the index of the iterations' commit times (the service)
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    src = make_source(str(gen.log), str(gen.repo), transcripts=[str(transcripts)])
    kept = tmp_path / "kept.sqlite"
    led = Ledger(Config(store=StoreConfig(path=kept), iteration_logs=(src,)))
    led.scan_all()
    assert src.id in led.planner.ends
    (gen.log / "iter-10.yaml").unlink()
    kept_before = {r[1]: r for r in scores(kept)}
    led.ingest_hint(src, {"iter-10.yaml"}, set())  # as the service's watch reports it
    led.rescore(src, backstop=False)
    assert src.id in led.planner.ends
    led.close()
    assert {r[1]: r for r in scores(kept)}[11][3] != kept_before[11][3]
    assert run_cli("ingest", "--once", "--rescore-all", *common, "--db", str(full))[0] == 0
    assert scores(kept) == {r for r in scores(full) if r[1] != 20}  # (20 was gone before this ledger began)


def test_random_changes_rescore_as_a_full_pass_would(tmp_path: Path) -> None:
    """A seeded run of random changes of every kind a log sees (records edited, removed,
    brought back, made unresolvable or malformed; hook outcomes (some malformed) and labels
    written and removed; verification artifacts flipped; plan scopes changed; transcript
    lines in random windows; trunk commits, reverts and a side branch landing; an archive,
    historical.yaml, of a few iterations written and removed). After each step a targeted
    `ingest --once` of one ledger, and a long-lived ledger told of the files that changed
    (as the service's watch tells it, then its trunk check), agree with a `--rescore-all`
    of a third. RANDOM_CHANGES_SEED=N runs another sequence (seeds 1-120 pass; seed 7 found
    the revert of test_a_revert_of_the_commit_an_unresolved_record_matched_rescores_it)."""
    import random

    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    rng = random.Random(int(os.environ.get("RANDOM_CHANGES_SEED", 20261127)))
    n = 40
    gen = synth.generate(tmp_path / "gen", n, seed=6)
    transcripts = tmp_path / "claude"
    transcripts.mkdir()
    t0 = 1_760_000_000  # synth's commits land at t0 + 60*i
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--transcripts", str(transcripts)]
    fast, full = tmp_path / "targeted.sqlite", tmp_path / "full.sqlite"
    original = {i: (gen.log / f"iter-{i}.yaml").read_text() for i in range(1, n + 1)}
    artifacts = sorted((gen.repo / ".agents/active/verification").glob("*/*.yaml"))
    plans = sorted((gen.repo / ".agents/workflow/plans").glob("*/TASKS.yaml"))
    touched: set[Path] = set()

    def put(p: Path, text: str | None) -> None:
        touched.add(p)
        if text is None:
            p.unlink(missing_ok=True)
        else:
            p.write_text(text)

    def transcript_line() -> None:
        at = t0 + 60 * rng.randint(1, n + 2) - rng.randint(1, 59)
        touched.add(transcripts / "s.jsonl")
        with (transcripts / "s.jsonl").open("a") as fh:
            fh.write(json.dumps({"type": "user", "timestamp": _iso(at), "message": {"content": [
                {"type": "tool_result", "is_error": rng.random() < 0.5}]}}) + "\n")

    def trunk() -> None:
        kind = rng.choice(["commit", "revert", "land"])
        if kind == "land" and "side" in git(gen.repo, "branch", "--list", "side"):
            git(gen.repo, "merge", "-q", "--no-ff", "-m", "land side", "side")
            git(gen.repo, "branch", "-q", "-D", "side")
        elif kind == "revert":
            victim = git(gen.repo, "log", "--format=%H", "--grep", f"^iter {rng.randint(2, n)}:")
            if victim and "\n" not in victim:
                try:
                    git(gen.repo, "revert", "--no-edit", victim)
                except subprocess.CalledProcessError:  # a conflict, or reverted already (nothing to commit)
                    subprocess.run(["git", "-C", str(gen.repo), "revert", "--abort"], capture_output=True)
        else:
            (gen.repo / "later.txt").write_text(str(rng.random()))
            git(gen.repo, "add", "later.txt")
            git(gen.repo, "commit", "-q", "-m", "later work")

    def archive(its: list[int]) -> str:
        """``historical.yaml`` (v1 records) for ``its``: a dedicated record wins over its
        entry; an entry stands in for a removed record, or for one the log never had."""
        entries = []
        for i in its:
            commit = original[i].split("\ncommit: ", 1)[1].split("\n", 1)[0] if i in original else "feedbee"
            entries.append(f"  - schema_version: 1\n    iteration: {i}\n    date: \"2026-04-0{i % 9 + 1}\"\n"
                           f"    commit: \"{commit}\"\n    scope_note: {rng.choice(['on-target', 'scope-breach'])}\n")
        return "iterations:\n" + "".join(entries)

    log = gen.log
    changes = {
        "edit": lambda i: put(log / f"iter-{i}.yaml", original[i].replace(
            "retries:", f"retries: {rng.randint(0, 5)}\n  old_retries:", 1)),
        "unresolvable": lambda i: put(log / f"iter-{i}.yaml",
                                      original[i].replace("\ncommit: ", "\ncommit: 0000000", 1)),
        "remove": lambda i: put(log / f"iter-{i}.yaml", None),
        "restore": lambda i: put(log / f"iter-{i}.yaml", original[i]),
        "hook": lambda i: put(log / f"iter-{i}.hook-outcomes.yaml", synth.hook_sidecar(i, rng)),
        "no hook": lambda i: put(log / f"iter-{i}.hook-outcomes.yaml", None),
        "labels": lambda i: put(log / f"iter-{i}.labels.yaml", synth.labels_sidecar(i, rng)),
        "no labels": lambda i: put(log / f"iter-{i}.labels.yaml", None),
        "artifact": lambda i: put(rng.choice(artifacts),
                                  f"schema_version: 1\nstatus: {rng.choice(['pass', 'fail'])}\n"),
        "plan": lambda i: put(rng.choice(plans), f"tasks:\n  - id: t{rng.randint(0, 3)}-0\n    write_scope:"
                                                  f" [\"{rng.choice(['src/', 'docs/', 'tests/'])}\"]\n"),
        "transcript": lambda i: transcript_line(),
        "trunk": lambda i: trunk(),
        "malformed": lambda i: put(log / f"iter-{i}.yaml", original[i][: rng.randint(20, 200)] + "\n  - [unclosed\n"),
        "bad hook": lambda i: put(log / f"iter-{i}.hook-outcomes.yaml", "records: {not: [a list\n"),
        "archive": lambda i: put(log / "historical.yaml", archive(rng.sample(range(1, n + 3), rng.randint(1, 4)))),
        "no archive": lambda i: put(log / "historical.yaml", None),
    }
    transcript_line()
    src = make_source(str(gen.log), str(gen.repo), transcripts=[str(transcripts)])
    service = Ledger(Config(store=StoreConfig(path=tmp_path / "service.sqlite"), iteration_logs=(src,)),
                     background_writes=True)
    try:
        service.scan_all()
        for db in (fast, full):  # the three ledgers share one history from here
            assert run_cli("ingest", "--once", *common, "--db", str(db))[0] == 0
        done = []
        for step in range(24):
            touched.clear()
            for _ in range(rng.randint(1, 3)):
                kind, i = rng.choice(sorted(changes)), rng.randint(1, n)
                changes[kind](i)
                done.append((kind, i))
            for db, extra in ((fast, []), (full, ["--rescore-all"])):
                code, _, err = run_cli("ingest", "--once", *extra, *common, "--db", str(db))
                assert code == 0, err
            assert scores(fast) == scores(full), f"step {step}: {done}"
            service.ingest_paths(sorted(touched))  # what the watch saw
            service.rescore(src)  # the trunk check
            assert scores(tmp_path / "service.sqlite") == scores(full), f"service, step {step}: {done}"
        assert len({kind for kind, _ in done}) >= 10  # the run met most kinds of change
    finally:
        service.close()


def test_a_revert_of_the_commit_an_unresolved_record_matched_rescores_it(tmp_path: Path) -> None:
    """A record whose commit does not resolve lands by its summary matching a trunk
    commit's subject; when the trunk brings a revert of that commit, a targeted pass
    rescores the record (now "later reverted"), as a full pass does."""
    gen = synth.generate(tmp_path / "gen", 40, seed=6)
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo)]
    fast, full = tmp_path / "targeted.sqlite", tmp_path / "full.sqlite"
    for db in (fast, full):
        assert run_cli("ingest", "--once", *common, "--db", str(db))[0] == 0
    with sqlite3.connect(fast) as c:
        matched = [(it, row["detail"]) for it, bd in c.execute("SELECT iteration, breakdown FROM score_details")
                   for row in json.loads(bd) if row["signal"] == "landed" and "message-matched" in row["detail"]
                   and "reverted" not in row["detail"]]
    assert matched, "the generated log has a record that lands by its summary"
    it, detail = matched[0]
    git(gen.repo, "revert", "--no-edit", detail.split("message-matched ", 1)[1].split()[0].rstrip(","))
    assert run_cli("ingest", "--once", *common, "--db", str(fast))[0] == 0
    assert run_cli("ingest", "--once", "--rescore-all", *common, "--db", str(full))[0] == 0
    with sqlite3.connect(fast) as c:
        (after,) = c.execute("SELECT breakdown FROM score_details WHERE iteration = ?", (it,)).fetchone()
    assert "later reverted by" in next(r["detail"] for r in json.loads(after) if r["signal"] == "landed")
    assert scores(fast) == scores(full)


def _ingested(tmp_path: Path, n: int):
    """A ledger (open: the caller closes it) that has ingested a generated log of ``n``
    iterations and scored none, and its source."""
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", n)
    src = make_source(str(gen.log), str(gen.repo))
    led = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(src,)))
    try:
        led.ingest(src)
    except BaseException:
        led.close()
        raise
    return led, src


@pytest.mark.parametrize("in_parts", [False, True])
def test_a_stop_while_the_planner_looks_ends_the_pass_before_it_scores(tmp_path: Path, monkeypatch,
                                                                       in_parts: bool) -> None:
    """A SIGTERM that comes while the planner builds its index of every iteration's commit
    (~3.5 s at 100,000) or while a part's inputs are gathered (``in_parts``: on the
    thread that gathers them) ends the pass there, not after the next batch of scores;
    nothing of the pass is committed, its queue stays, no thread of it is left, and the
    next pass does the work."""
    import threading

    from agentledger.errors import Stopping
    from agentledger.ledger import scoring_pass

    if in_parts:
        monkeypatch.setattr(scoring_pass, "FIRST_PART", 10)
        monkeypatch.setattr(scoring_pass, "GATHER_CHUNK", 20)
    led, src = _ingested(tmp_path, 50)
    try:
        # in parts: asked of the thread gathering the first part, after the planner
        led.ctx.stopping = (lambda: threading.current_thread().name == "agentledger-gather") if in_parts \
            else (lambda: True)
        with pytest.raises(Stopping):
            led.rescore(src)
        assert not threads_named("agentledger-g")
        assert led.conn.execute("SELECT count(*) FROM events WHERE type = 'score.computed'").fetchone()[0] == 0
        assert led.conn.execute("SELECT count(*) FROM pending").fetchone()[0] > 0
        led.ctx.stopping = lambda: False
        assert led.rescore(src).scored == 50
    finally:
        led.close()


@pytest.mark.parametrize("trailing_unchanged", [False, True])
def test_a_pass_runs_finish_once_after_its_last_scores_are_committed(tmp_path: Path, monkeypatch,
                                                                     trailing_unchanged: bool) -> None:
    """A batch is committed as soon as it is full; ``finish`` (the trunk tip and the queue
    entries the pass handled) runs once, in the transaction of the batch known to be the
    last (every job has given its result), or in its own right after the last batch when
    only unchanged iterations followed it; either way after every new score is committed."""
    from agentledger.ledger import scoring_pass

    monkeypatch.setattr(scoring_pass, "BATCH", 2)
    led, src = _ingested(tmp_path, 6)
    try:
        led.ensure_rubric()
        if trailing_unchanged:
            led.scoring.score(src, [3, 4, 5, 6])  # scored already: unchanged in the pass below
        calls = []
        other = sqlite3.connect(tmp_path / "l.sqlite")  # sees what is committed

        def finish() -> None:
            count = "SELECT count(*) FROM scores"
            calls.append((led.conn.in_transaction, led.conn.execute(count).fetchone()[0],
                          other.execute(count).fetchone()[0]))

        report = led.scoring.score(src, [1, 2, 3, 4, 5, 6], finish=finish)
        other.close()
        assert report.scored == (2 if trailing_unchanged else 6)
        assert report.unchanged == (4 if trailing_unchanged else 0)
        # all six scored once finish runs; committed already but for the last batch's two
        # when that batch was known to be the last
        assert calls == [(True, 6, 6 if trailing_unchanged else 4)]
    finally:
        led.close()


def _settled(directory: Path) -> None:
    """Until the listing of ``directory`` can vouch for it: its newest change is older
    than the racy window (``listing.RACY_NS``: a file changed again within its clock tick
    would keep its ctime)."""
    from agentledger.sources.iterlogs.listing import RACY_NS

    newest = max(max(p.stat().st_ctime_ns, p.stat().st_mtime_ns) for p in [directory, *directory.iterdir()])
    assert wait_until(lambda: time.time_ns() > newest + RACY_NS, 10)


def test_a_quiet_scan_keeps_a_mark_the_next_scan_trusts_only_while_nothing_moved(tmp_path: Path) -> None:
    """A scan that finds the log directory in line with the ledger keeps its listing's
    mark; the next scan with the same mark compares no sidecar (the cache of sidecars read,
    emptied here, stays empty). Every change to the directory — a record edited, a sidecar
    forged by hand, deleted, a temp file left — and an event committed by another source
    breaks the mark, and the scan after finds and mends what a full comparison would.
    A rebuild forgets every mark; a listing within the racy window keeps none."""
    import pytest

    from agentledger.sources.iterlogs import listing

    gen = synth.generate(tmp_path / "gen", 30, seed=6)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "--json"]

    def ingest(*extra: str) -> dict:
        code, out, err = run_cli("ingest", *args, *extra)
        assert code == 0, err
        return json.loads(out)

    def marks() -> int:
        return query(db, "SELECT count(*) FROM scan_marks")[0][0]

    def forget_seen() -> None:
        with sqlite3.connect(db) as c:
            c.execute("DELETE FROM sidecar_seen")

    def seen() -> int:
        return query(db, "SELECT count(*) FROM sidecar_seen")[0][0]

    def quiet_then_trusted() -> None:
        _settled(gen.log)
        assert ingest()["files_read"] == 0 and marks() == 1  # quiet: the mark is kept
        forget_seen()
        again = ingest()
        assert again["files_read"] == again["events"] == again["sidecars_written"] == 0
        assert seen() == 0  # no sidecar compared: the mark vouched for them

    assert ingest()["scored"] == 30 and marks() == 0  # it wrote: no mark
    quiet_then_trusted()

    record = gen.log / "iter-12.yaml"
    text = record.read_text()
    edited = text.replace("scope_note: on-target", "scope_note: off-target") if "on-target" in text else \
        text.replace("retries: 0", "retries: 9", 1)
    assert edited != text and len(edited) == len(text)
    record.write_text(edited)
    _settled(gen.log)  # (within the racy window no mark is trusted at all)
    found = ingest()
    assert found["files_read"] == 1 and found["events"] >= 1 and seen() > 0
    quiet_then_trusted()

    sidecar = gen.log / "iter-30.score.yaml"
    stext = sidecar.read_text()
    forged = stext.replace("rubric_version: 2.1.0", "rubric_version: 9.9.9")
    assert len(forged) == len(stext) and forged != stext
    sidecar.write_text(forged)
    _settled(gen.log)
    assert ingest()["sidecars_written"] == 1 and sidecar.read_text() == stext
    quiet_then_trusted()

    sidecar.unlink()
    _settled(gen.log)
    assert ingest()["sidecars_written"] == 1 and sidecar.read_text() == stext
    quiet_then_trusted()

    forget_seen()
    record.chmod(0o600)  # only its ctime moves
    _settled(gen.log)
    assert ingest()["files_read"] == 0 and seen() > 0  # not trusted: every sidecar compared
    quiet_then_trusted()

    gone = subprocess.Popen(["true"])
    gone.wait()
    temp = gen.log / f".agentledger-{gone.pid}-iter-3.score.yaml.tmp"  # a killed writer's
    temp.write_text("half a sidecar")
    _settled(gen.log)
    ingest()
    assert not temp.exists()  # swept, as every full comparison does
    quiet_then_trusted()

    vally = tmp_path / "vally"
    vally.mkdir()
    (vally / "results.jsonl").write_text("not a record\n")
    assert run_cli("ingest", "--vally", str(vally), "--db", str(db), "--json")[0] == 0  # an event, elsewhere
    ingest()
    assert seen() > 0  # the ledger moved: every sidecar compared again
    quiet_then_trusted()

    assert run_cli("rebuild", *args)[0] == 0 and marks() == 0
    _settled(gen.log)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(listing, "RACY_NS", 10**18)  # every change counts as within the window
        ingest()
        assert marks() == 0

    # an event committed while a scan runs (after its listing matched): its sidecars are compared
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger
    from agentledger.sources.iterlogs.listing import list_log_dir

    quiet_then_trusted()
    src = make_source(str(gen.log), str(gen.repo))
    led = Ledger(Config(store=StoreConfig(path=db), iteration_logs=(src,)))
    try:
        assert led.marks.begin(src, list_log_dir(src).mark) and led.marks.in_line(src)
        assert run_cli("ingest", "--vally", str(vally), "--db", str(db))[0] == 0
        (vally / "results.jsonl").write_text("not a record\nnor this\n")
        assert run_cli("ingest", "--vally", str(vally), "--db", str(db))[0] == 0
        assert not led.marks.in_line(src)
    finally:
        led.close()



def test_a_trusted_scan_reads_the_artifacts_checkpoints_through_their_index_and_finds_a_moved_one(
        tmp_path: Path) -> None:
    """A scan whose mark vouches for the log directory still compares each artifact with
    its checkpoint: it reads exactly the artifacts' and plans' checkpoints, through
    migration 0027's partial index (a full scan of the source's checkpoints otherwise),
    and an artifact edited in place is read again, its iteration rescored."""
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 60, seed=11)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "--json"]
    assert run_cli("ingest", *args)[0] == 0
    src = make_source(str(gen.log), str(gen.repo))
    led = Ledger(Config(store=StoreConfig(path=db), iteration_logs=(src,)))
    try:
        statements: list[str] = []
        led.conn.set_trace_callback(statements.append)
        arts = led.iterlogs._known(src, with_logs=False)[2]
        led.conn.set_trace_callback(None)
        read = [s for s in statements if "FROM source_checkpoints" in s]
        assert len(read) == 1
        plan = " ".join(r[3] for r in led.conn.execute("EXPLAIN QUERY PLAN " + read[0]))
        assert "USING INDEX checkpoints_of_artifacts" in plan, plan
        every = {r[0]: tuple(r[1:]) for r in led.conn.execute(
            "SELECT path, dev, ino, size, mtime_ns FROM source_checkpoints NOT INDEXED WHERE source = ?"
            " AND kind IN ('verifier_result', 'review_decision', 'tasks') AND content_hash IS NOT NULL"
            " AND content_hash <> '' AND content_hash NOT LIKE 'error:%'", (src.id,))}
        assert arts == every and len(every) > 5
    finally:
        led.close()

    _settled(gen.log)
    assert json.loads(run_cli("ingest", *args)[1])["files_read"] == 0  # quiet: a mark is kept
    _settled(gen.log)
    rel = next(p for p in every if "/verification/" in p)
    artifact = gen.repo / rel
    text = artifact.read_text()
    edited = text.replace("pass", "fail", 1) if "pass" in text else text.replace("fail", "pass", 1)
    assert edited != text
    artifact.write_text(edited)
    out = json.loads(run_cli("ingest", *args)[1])
    assert out["files_read"] == 1 and out["scored"] >= 1


def test_a_trusted_scan_spares_the_backstop_and_an_untrusted_one_runs_it(tmp_path: Path, monkeypatch) -> None:
    """The backstop (every iteration without a score under the active rubric) runs in a
    scan whose mark does not hold and is spared in one whose mark holds with nothing
    committed since: the last quiet scan found no such iteration, and none can appear
    without an event. A new iteration breaks the mark, and it is scored."""
    from agentledger.store import db as store_db

    statements: list[str] = []
    connect = store_db.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(store_db, "connect", traced)
    gen = synth.generate(tmp_path / "gen", 40, seed=13)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "--json"]

    def ingest() -> tuple[int, int, bool]:
        """(files read, iterations scored, whether the backstop's query ran)"""
        statements.clear()
        code, out, err = run_cli("ingest", *args)
        assert code == 0, err
        report = json.loads(out)
        return report["files_read"], report["scored"], any("NOT IN (SELECT iteration FROM scores" in s
                                                           for s in statements)

    assert ingest()[1:] == (40, True)
    _settled(gen.log)
    assert ingest() == (0, 0, True)  # quiet: its mark is kept, but no kept mark vouched for this one
    assert ingest() == (0, 0, False)  # the mark holds: the backstop is spared
    with sqlite3.connect(db) as c:
        c.execute("DELETE FROM scan_marks")
    assert ingest() == (0, 0, True)
    assert ingest() == (0, 0, False)
    synth.add_iteration(gen, 41)
    _settled(gen.log)
    read, scored, backstop = ingest()
    assert read == 1 and scored >= 1 and backstop
    assert query(db, "SELECT count(*) FROM scores WHERE iteration = 41")[0][0] == 1


def test_a_full_sync_takes_each_sidecars_stat_from_the_scans_listing(tmp_path: Path, monkeypatch) -> None:
    """A full scan stats each sidecar once, in its listing of the directory: the comparison
    with the ledger that follows takes those stats (no ``os.stat`` of a sidecar). It sees
    the directory as listed: a sidecar forged after the listing is found, and mended, by
    the next scan, whose listing has moved (no mark kept from the scan between holds)."""
    import agentledger.ledger.iterlogs as iterlogs_mod
    import agentledger.ledger.sidecar_sync as sync_mod

    gen = synth.generate(tmp_path / "gen", 30, seed=8)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "--json"]
    assert run_cli("ingest", *args)[0] == 0
    _settled(gen.log)
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(sync_mod.os, "stat", lambda p, *a, **k: stats.append(str(p)) or real_stat(p, *a, **k))
    with sqlite3.connect(db) as c:
        c.execute("DELETE FROM scan_marks")  # every file compared
        c.execute("DELETE FROM sidecar_seen")  # and every sidecar read
    code, out, err = run_cli("ingest", *args)
    assert code == 0 and json.loads(out)["sidecars_written"] == 0, err
    assert query(db, "SELECT count(*) FROM sidecar_seen")[0][0] >= 30  # compared, each
    assert not [p for p in stats if p.endswith(".score.yaml")], stats[:3]

    sidecar = gen.log / "iter-7.score.yaml"
    right = sidecar.read_text()
    forged = right.replace("rubric_version: 2.1.0", "rubric_version: 9.9.9")
    assert forged != right and len(forged) == len(right)
    real_list = iterlogs_mod.list_log_dir

    def list_then_forge(src):
        listing = real_list(src)
        sidecar.write_text(forged)  # after the listing, before the comparison
        return listing

    monkeypatch.setattr(iterlogs_mod, "list_log_dir", list_then_forge)
    assert run_cli("ingest", *args)[0] == 0
    assert sidecar.read_text() == forged  # as listed, it held
    monkeypatch.setattr(iterlogs_mod, "list_log_dir", real_list)
    _settled(gen.log)
    code, out, _ = run_cli("ingest", *args)
    assert code == 0 and json.loads(out)["sidecars_written"] == 1 and sidecar.read_text() == right


def test_a_file_put_back_as_it_was_and_an_edit_made_again_are_recorded_again(tmp_path: Path) -> None:
    """A record removed and put back as it was (``git stash``, a checkout), twice; an edit
    of it undone and made again; an artifact removed and put back: after each ingest the
    ledger holds what a fresh ledger makes of the files as they are, records, artifacts
    and scores. Each change's key names where its file's history stood, and a score's the
    score it replaces: they used to be made of the content (or inputs) before and after
    alone, so a change made again had the first one's key, and the ledger dropped it as
    that one sent twice (the record stayed removed; the edit made again kept the score of
    the undone one)."""
    gen = synth.generate(tmp_path / "gen", 30, seed=3)
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo)]

    def ingest(db: Path) -> None:
        code, _, err = run_cli("ingest", *args, "--db", str(db))
        assert code == 0, err

    def held(db: Path) -> tuple[list, list, list]:
        with sqlite3.connect(db) as c:
            return (c.execute("SELECT iteration, task_id, content_hash FROM iterations ORDER BY 1").fetchall(),
                    c.execute("SELECT path, kind, available, artifact, content_hash FROM artifacts ORDER BY 1").fetchall(),
                    c.execute("SELECT s.iteration, s.inputs_hash, s.value, s.band FROM latest_scores s"
                              " JOIN iterations i USING (source, iteration) ORDER BY 1").fetchall())

    def as_fresh(step: str) -> None:
        ingest(db)
        fresh = tmp_path / f"fresh-{step}.sqlite"
        ingest(fresh)
        assert held(db) == held(fresh), step

    db = tmp_path / "l.sqlite"
    ingest(db)
    record, artifact = gen.log / "iter-3.yaml", gen.repo / ".agents/active/verification/task-7/test.result.yaml"
    text, verdict = record.read_text(), artifact.read_text()
    for k in range(2):
        record.unlink()
        as_fresh(f"removed {k}")
        assert 3 not in [r[0] for r in held(db)[0]]
        record.write_text(text)
        as_fresh(f"put back {k}")
        assert (3, "t3-0") in [r[:2] for r in held(db)[0]]
    edited = text.replace("task_id: t3-0", "task_id: t3-edited")
    assert edited != text
    for k, now in enumerate([edited, text, edited]):
        record.write_text(now)
        as_fresh(f"edit {k}")
    assert (3, "t3-edited") in [r[:2] for r in held(db)[0]]
    artifact.unlink()
    as_fresh("artifact removed")
    artifact.write_text(verdict)
    as_fresh("artifact put back")
    assert any(r[0] == ".agents/active/verification/task-7/test.result.yaml" for r in held(db)[1])
