"""Bulk paths: worker processes, the unrolled sidecar renderer, backfill after SIGKILL."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentledger.config import Config, StoreConfig, make_source
from agentledger.example import synth
from agentledger.ledger import Ledger
from agentledger.output.sidecars import (
    BreakdownRow,
    SessionEntry,
    render_iteration,
    render_iteration_generic,
    render_session,
    render_session_generic,
)
from agentledger.process import parallel
from agentledger.scoring.signals import SignalValue
from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import REAL_LOG, REFERENCE, copy_log, need_fixtures, threads_named

REAL_REF = REFERENCE / "rubric-2.1.0" / "real-iteration-log"  # the Go scorer's sidecars of REAL_LOG


def _real_log_ledger(tmp_path: Path, repo) -> tuple[Path, Ledger]:
    """A writable copy of the real iteration log and a new ledger of it (``repo``: its git tree)."""
    need_fixtures()
    log = copy_log(REAL_LOG, tmp_path / "log")
    return log, Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"),
                              iteration_logs=(make_source(log, repo.path),)))


def test_worker_pool_gives_the_same_bytes(tmp_path: Path, empty_repo, monkeypatch) -> None:
    monkeypatch.setattr(parallel, "THRESHOLD", 1)
    log, ledger = _real_log_ledger(tmp_path, empty_repo)
    src = ledger.cfg.iteration_logs[0]
    try:
        ledger.ingest(src)
        ledger.ensure_rubric()
        report = ledger.score(src)
        assert report.scored == 46 and parallel._pool is not None  # really went through workers
    finally:
        ledger.close()
    for p in REAL_REF.iterdir():
        assert (log / p.name).read_bytes() == p.read_bytes(), p.name


def test_a_sync_of_more_iterations_than_sqlite_takes_variables(tmp_path: Path, empty_repo) -> None:
    """A scoring pass ends by syncing the sidecars of the iterations it was given (a cold
    ingest: every one): a placeholder each failed past SQLite's limit on variables (250,000
    on Debian's build) with "too many SQL variables", after every score was committed and
    before any stale sidecar was put right."""
    log, ledger = _real_log_ledger(tmp_path, empty_repo)
    src = ledger.cfg.iteration_logs[0]
    try:
        ledger.ingest(src)
        ledger.ensure_rubric()
        ledger.score(src)
        session = next(REAL_REF.glob("session-*.score.yaml")).name
        for name in ("iter-7.score.yaml", session):
            (log / name).write_bytes(b"stale\n")
        many = list(range(ledger.ctx.conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) + 1))
        report = ledger.sidecars.sync(src, many)
        assert (report.sidecars_written, report.sessions_written, report.errors) == (1, 1, [])
        for name in ("iter-7.score.yaml", session):
            assert (log / name).read_bytes() == (REAL_REF / name).read_bytes(), name
    finally:
        ledger.close()


def test_a_full_pass_compares_each_sidecar_with_the_ledger_once(tmp_path: Path, empty_repo, monkeypatch) -> None:
    """A scan ends by bringing every sidecar in line; it did so after its scoring pass had
    synced the iterations it scored, so each sidecar the pass had just written was
    stat'ed again (0.05-0.1 s at 10,000, with a core idle). Now one pass over the
    sidecars, which skips those just written; one the pass did not write is still put right."""
    from agentledger.ledger import sidecar_sync

    compared: list[str] = []
    holds = sidecar_sync.Seen.holds
    monkeypatch.setattr(sidecar_sync.Seen, "holds", lambda self, path, *a: compared.append(path) or holds(self, path, *a))
    log, ledger = _real_log_ledger(tmp_path, empty_repo)
    try:
        assert ledger.scan_all().scored == 46
        assert compared == []  # every sidecar was just written by the pass
        (log / "iter-7.score.yaml").write_bytes(b"stale\n")
        report = ledger.scan_all()
        assert (report.scored, report.sidecars_written) == (0, 1)
        assert len(compared) == len(set(compared)) == 46 + 3  # each score's and session's sidecar, once
    finally:
        ledger.close()
    assert (log / "iter-7.score.yaml").read_bytes() == (REAL_REF / "iter-7.score.yaml").read_bytes()


def _pid(_: object) -> int:
    return os.getpid()


@pytest.fixture
def no_pool(monkeypatch):
    """No worker pool yet (this test starts its own), and none left after it."""
    if parallel.workers() < 2:
        pytest.skip("one core: no worker processes")
    monkeypatch.setattr(parallel, "_disabled", False)
    parallel.shutdown()
    yield
    parallel.shutdown()


def test_the_first_chunk_is_made_while_the_pool_starts_on_its_thread(no_pool, monkeypatch) -> None:
    """With the pool's start under way on its thread (``prestart``), ``pmap`` draws its
    first chunk meanwhile (a scoring pass gathering its first part) instead of waiting for
    the workers first: here the start waits for the first item to be drawn."""
    import threading

    drawn, held = threading.Event(), []
    real_start = parallel._start_pool

    def start_once_drawn(n: int):
        held.append(drawn.wait(10))
        return real_start(n)

    def items():
        drawn.set()
        yield from range(-300, 0)

    monkeypatch.setattr(parallel, "_start_pool", start_once_drawn)
    monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "300")
    assert parallel.prestart(300)
    assert list(parallel.pmap(abs, items(), total=300)) == list(range(300, 0, -1))
    assert held == [True] and parallel._pool is not None


def test_a_running_pool_takes_medium_batches(no_pool) -> None:
    """Workers are started only for bulk work (the close-task hook never pays for them),
    but once running (a daemon after its first scan) a batch of 64 or more uses them."""
    me = os.getpid()
    assert set(parallel.pmap(_pid, list(range(100)))) == {me}  # no pool yet: in-process
    assert me not in set(parallel.pmap(_pid, list(range(parallel.THRESHOLD))))  # bulk starts it
    assert me not in set(parallel.pmap(_pid, list(range(parallel.WARM_THRESHOLD))))
    assert set(parallel.pmap(_pid, list(range(parallel.WARM_THRESHOLD - 1)))) == {me}


def _young(_: object) -> int:
    import gc

    return gc.get_threshold()[0]


def test_commands_and_workers_collect_garbage_at_the_bulk_pace(tmp_path: Path, empty_repo, no_pool) -> None:
    """A cold ingest spent ~13 % of its committing process's CPU in the cyclic collector
    at CPython's default pace (process/collector.py): every command and every worker
    runs at the slower one."""
    import gc

    from agentledger.cli import main
    from agentledger.process import collector

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, *saved[1:])
        (tmp_path / "log").mkdir()
        assert main(["ingest", "--iteration-log", str(tmp_path / "log"), "--repo", str(empty_repo.path),
                     "--db", str(tmp_path / "l.sqlite"), "-q"]) == 0
        assert gc.get_threshold() == (collector.YOUNG, *saved[1:])
        assert set(parallel.pmap(_young, list(range(parallel.THRESHOLD)))) == {collector.YOUNG}
    finally:
        gc.set_threshold(*saved)


def test_a_cold_ingest_starts_its_workers_while_it_creates_the_ledger(tmp_path: Path, empty_repo, no_pool,
                                                                       monkeypatch) -> None:
    """An ingest that will create its ledger and read a log of at least the pool's
    threshold starts the workers before the ledger's schema is made (cli/ingest.py);
    one into an existing ledger, or of a smaller log, does not; the sidecars are the
    reference's either way."""
    from agentledger.cli import main

    need_fixtures()
    log = copy_log(REAL_LOG, tmp_path / "log")
    db = tmp_path / "l.sqlite"
    early: list[bool] = []  # at each start of the pool: whether the ledger existed yet
    started = parallel.prestart

    def prestart(size: int) -> bool:
        early.append(db.exists())
        return started(size)

    monkeypatch.setattr(parallel, "prestart", prestart)
    flags = ["--iteration-log", str(log), "--repo", str(empty_repo.path), "--db", str(db), "-q"]
    monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "19")  # the log has 18 files to read
    assert main(["ingest", "--once", *flags]) == 0
    assert early == [] and db.exists()
    db.unlink()
    monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "18")
    assert main(["ingest", "--once", *flags]) == 0
    assert early == [False] and parallel._pool is None  # started before the ledger was, ended with it
    for p in REAL_REF.iterdir():
        assert (log / p.name).read_bytes() == p.read_bytes(), p.name
    assert main(["ingest", "--once", *flags]) == 0
    assert early == [False]


def test_workers_started_for_a_ledger_that_cannot_be_made_end_with_the_command(tmp_path: Path, empty_repo,
                                                                               no_pool, monkeypatch) -> None:
    from agentledger.cli import main

    synth.generate(tmp_path / "gen", 12)
    log = tmp_path / "gen" / "repo" / ".agents" / "active" / "iteration-log"
    (tmp_path / "file").write_text("not a directory\n")
    monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "10")
    code = main(["ingest", "--once", "--iteration-log", str(log), "--repo", str(tmp_path / "gen" / "repo"),
                 "--db", str(tmp_path / "file" / "l.sqlite"), "-q"])
    assert code != 0
    assert parallel._pool is None and not threads_named("agentledger-pool-start")
    assert not multiprocessing.active_children()  # the forkserver, and with it every worker, is gone


def test_pool_failure_falls_back_in_process(monkeypatch) -> None:
    from concurrent.futures.process import BrokenProcessPool

    class Broken:
        def submit(self, *a, **k):
            raise BrokenProcessPool("workers died")

        def shutdown(self, **k):
            pass

    monkeypatch.setattr(parallel, "THRESHOLD", 1)
    monkeypatch.setattr(parallel, "WARM_THRESHOLD", 1)
    monkeypatch.setattr(parallel, "_pool", Broken())
    monkeypatch.setattr(parallel, "_disabled", False)
    assert list(parallel.pmap(abs, [-1, -2, 3])) == [1, 2, 3]
    assert parallel._disabled is True


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.0, 0.5]))
texts = st.one_of(st.text(max_size=30), st.sampled_from(["scope_note: on-target", "a\nb", "yes", "", "1.5", "x #y"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.booleans(), floats, texts, floats, floats, floats), max_size=8),
       st.booleans(), floats, st.booleans())
def test_unrolled_renderer_equals_generic_emitter(rows, scored, value, marker) -> None:
    breakdown = [BreakdownRow(*r) for r in rows]
    assert render_iteration(7, "2.1.0", scored, value, "good", breakdown, marker) == \
        render_iteration_generic(7, "2.1.0", scored, value, "good", breakdown, marker)


@settings(max_examples=300, deadline=None)
@given(texts, st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.booleans(), floats, texts), max_size=6),
       st.booleans(), floats, texts)
def test_unrolled_session_renderer_equals_generic_emitter(session_id, entries, scored, value, band) -> None:
    rows = [SessionEntry(*e) for e in entries]
    assert render_session(session_id, "2.1.0", rows, scored, value, band) == \
        render_session_generic(session_id, "2.1.0", rows, scored, value, band)


def test_negative_zero_rows_are_not_confused_with_zero() -> None:
    pos = BreakdownRow("s", "l", True, 0.0, "d", 0.1, 0.5, 0.0)
    neg = BreakdownRow("s", "l", True, -0.0, "d", 0.1, 0.5, -0.0)
    assert b"sub_score: 0\n" in render_iteration(1, "2.1.0", True, 0.0, "poor", [pos])
    assert b"sub_score: -0\n" in render_iteration(1, "2.1.0", True, 0.0, "poor", [neg])


@pytest.mark.slow
def test_backfill_survives_sigkill_and_resumes(tmp_path: Path) -> None:
    """Kill a real backfill process mid-way; the next run finishes it, nothing is duplicated."""
    gen = synth.generate(tmp_path / "gen", 1500)
    db = tmp_path / "l.sqlite"
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "-q"]
    run = lambda *a: subprocess.run([sys.executable, "-m", "agentledger", *a], capture_output=True, text=True)  # noqa: E731
    assert run("ingest", "--once", *common).returncode == 0
    env = {**os.environ, "AGENTLEDGER_WORKERS": "1"}  # one process to kill: no worker left behind
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "backfill", "--rubric", "3.0.0", *common],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    done = 0
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as c:
                done = c.execute("SELECT count(*) FROM scores WHERE rubric_version = '3.0.0'").fetchone()[0]
        except sqlite3.OperationalError:
            done = 0
        if done >= 500 or proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < done < 1500, f"the kill did not land mid-backfill ({done} rescored)"

    c = sqlite3.connect(db)
    assert c.execute("SELECT value FROM ledger_state WHERE key = 'backfill'").fetchone() is not None
    c.close()
    result = run("ingest", "--once", "--json", "--rubric", "3.0.0", *common[:-1])
    assert result.returncode == 0, result.stderr
    c = sqlite3.connect(db)
    assert c.execute("SELECT value FROM ledger_state WHERE key = 'backfill'").fetchone() is None
    assert c.execute("SELECT count(*) FROM scores WHERE rubric_version = '3.0.0'").fetchone()[0] == 1500
    # One score event per iteration and rubric: nothing rescored twice across the kill.
    dup = c.execute("SELECT count(*) FROM (SELECT json_extract(payload, '$.iteration') AS it, count(*) AS n"
                    " FROM events WHERE type = 'score.computed' AND json_extract(payload, '$.rubric_version') = '3.0.0'"
                    " GROUP BY it HAVING n > 1)").fetchone()[0]
    assert dup == 0
    assert c.execute("SELECT count(*) FROM events WHERE type = 'backfill.completed'").fetchone()[0] == 1
    for p in gen.log.glob("iter-*.score.yaml"):
        assert b"rubric_version: 3.0.0\n" in p.read_bytes(), p.name
    sessions = list(gen.log.glob("session-*.score.yaml"))
    assert sessions and all(b"rubric_version: 3.0.0\n" in p.read_bytes() for p in sessions)
    assert json.loads(result.stdout)["errors"] == []


@pytest.mark.parametrize("breaks_at", ["submit", "result"])
def test_a_pool_that_breaks_mid_stream_loses_no_item(monkeypatch, breaks_at: str) -> None:
    """Workers that die while a bounded stream is in flight: every item is still done,
    in order, here (the item being submitted, and the one whose result was awaited,
    were dropped before)."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class Breaking:
        def __init__(self) -> None:
            self.calls = 0

        def submit(self, fn, item):
            self.calls += 1
            if breaks_at == "submit" and self.calls == 4:
                raise BrokenProcessPool("workers died")
            f: Future = Future()
            if breaks_at == "result" and self.calls >= 3:
                f.set_exception(BrokenProcessPool("workers died"))
            else:
                f.set_result(fn(item))
            return f

        def shutdown(self, **k):
            pass

    monkeypatch.setattr(parallel, "_pool", Breaking())
    monkeypatch.setattr(parallel, "_disabled", False)
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    assert list(parallel.imap_bounded(abs, iter(range(-10, 0)), in_flight=2)) == list(range(10, 0, -1))
    assert parallel._disabled is True


def score_payload(s, digest: str, marker: bool, key: str, window: tuple | None = None) -> dict:
    """The ``score.computed`` payload as dicts, field by field: what ``payload_json`` must
    write as the JSON encoder would (the workers write the text directly)."""
    from agentledger.jsonnum import encode_float as f
    from agentledger.output import sidecars

    breakdown = [{"signal": r.signal, "label": r.label, "present": r.present, "sub_score": f(r.sub_score),
                  "detail": r.detail, "nominal_weight": f(r.nominal_weight),
                  "effective_weight": f(r.effective_weight), "contribution": f(r.contribution)}
                 for r in s.breakdown]
    integrity = [{"signal": p.signal, "role": p.role,
                  "claimed": {"present": p.claimed.present, "sub_score": f(p.claimed.sub_score),
                              "detail": p.claimed.detail},
                  "observed": {"present": p.observed.present, "sub_score": f(p.observed.sub_score),
                               "detail": p.observed.detail},
                  "comparable": p.comparable, "delta": f(p.delta)} for p in s.integrity]
    return {
        "iteration": s.iteration, "rubric_version": s.rubric_version, "inputs_hash": digest, "inputs_key": key,
        "scored": s.scored, "value": f(s.value), "band": s.band,
        "breakdown": breakdown, "integrity": integrity,
        "linked_traces": s.linked_traces, "marker": marker,
        "sidecar": sidecars.iteration_sidecar_name(s.iteration),
        "window": list(window) if window is not None else None,
    }


numbers = st.one_of(floats, st.integers(-(2**70), 2**70), st.booleans())  # a rubric's weights may be integers
values = st.builds(SignalValue, st.booleans(), numbers, texts)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.booleans(), numbers, texts, numbers, numbers, numbers), max_size=8),
       st.lists(st.tuples(texts, texts, values, values, st.booleans(), numbers), max_size=4),
       st.integers(0, 2**63 - 1), texts, st.booleans(), numbers, texts, st.booleans(), st.booleans(),
       st.one_of(st.none(), st.tuples(st.one_of(st.none(), st.integers()), st.integers())))
def test_a_payloads_text_is_the_encoders(rows, pairs, iteration, version, scored, value, band, linked, marker,
                                         window) -> None:
    """The score payload's text, written field by field (``payload_json``), is what the JSON
    encoder makes of the payload's dict, and its ``signals`` what ``signals_of`` makes of
    its breakdown; the sidecar made from its rows' texts (``sidecar_bytes``) is the
    renderer's: integers where floats are expected, non-finite numbers, negative zeros,
    repeated signals and odd strings included."""
    from agentledger.ledger.score_job import payload_json, sidecar_bytes
    from agentledger.scoring.combine import IntegrityPair, Score
    from agentledger.store.events import canonical_json
    from agentledger.store.scores import signals_of

    s = Score(iteration, version, scored, value, band, tuple(BreakdownRow(*r) for r in rows),
              tuple(IntegrityPair(*p) for p in pairs), linked)
    payload = score_payload(s, "sha256:d", marker, "sha256:k", window)
    want = render_iteration(s.iteration, s.rubric_version, s.scored, float(s.value), s.band, s.breakdown,
                            bool(marker and s.linked_traces))
    for _ in range(2):  # the second time, rows come from the lookups (1, 1.0 and True, 0.0 and -0.0 kept apart)
        texts: list[str] = []
        assert payload_json(s, "sha256:d", marker, "sha256:k", window, texts) == (canonical_json(payload),
                                                                                  signals_of(payload["breakdown"]))
        assert texts == [canonical_json(r) for r in payload["breakdown"]]
        assert sidecar_bytes(s, texts, marker) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.booleans(), floats, texts, floats, floats, floats), max_size=8),
       st.booleans(), floats, st.booleans(), st.booleans(), st.sampled_from([1, 2]))
def test_a_stored_score_renders_as_its_payload_does(rows, scored, value, marker, linked, version) -> None:
    """A bulk sync renders from what SQLite takes out of the stored payload, rows looked up
    by their stored JSON (``render_stored``); the bytes are ``render_score_payload``'s of
    the whole payload, negative zeros, non-finite numbers, odd strings and rows seen
    before included."""
    import sqlite3

    from agentledger.scoring.combine import Score
    from agentledger.store.events import canonical_json, upcast
    from agentledger.store.scores import STORED_SQL, render_score_payload, render_stored, stored_job

    s = Score(7, "2.1.0", scored, value, "good", tuple(BreakdownRow(*r) for r in rows), (), linked)
    payload = score_payload(s, "sha256:x", marker, "k", None)
    if version == 1:
        del payload["window"]
    text = canonical_json(payload)
    fields = sqlite3.connect(":memory:").execute(f"SELECT {STORED_SQL} FROM (SELECT ? AS payload)", (text,)).fetchone()
    job = stored_job("p", "score.computed", version, *fields) or ("p", "score.computed", version, text)
    assert len(job) == (3 if version == 2 else 4)  # the short way for the current version
    want = render_score_payload(upcast("score.computed", version, json.loads(text)))
    for _ in range(2):  # the second time, every row comes from the lookup
        assert render_stored(job) == ("p", want)
    if len(job) == 3 and job[2]:  # rows in another order than the payload's: put back in order
        assert render_stored((*job[:2], "\x1e".join(reversed(job[2].split("\x1e"))))) == ("p", want)


def test_the_forkserver_imports_the_workers_jobs_and_not_the_committing_side() -> None:
    """The modules the pool's forkserver imports before it forks the workers
    (``parallel.PRELOAD``, named by ``agentledger.ledger``) bring in what the workers run:
    no facade, scoring pass, planner or sidecar sync, which cost the forkserver ~90 ms of
    imports on every command that starts the pool (a switch back waits for it)."""
    code = ("import sys, importlib, agentledger.process.parallel as P\n"
            "before = set(sys.modules)\n"
            "import agentledger.ledger\n"  # (the package names them, and is imported with them)
            "[importlib.import_module(m) for m in P.PRELOAD]\n"
            "print(sorted(P.PRELOAD)); print(sorted(m for m in set(sys.modules) - before if m.startswith('agentledger')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert eval(out[0]) == ["agentledger.ledger.observe_job", "agentledger.ledger.score_job",
                            "agentledger.ledger.sidecar_writes"]
    imported = eval(out[1])
    assert "agentledger.ledger.observe_job" in imported
    for heavy in ("facade", "scoring_pass", "planner", "sidecar_sync", "iterlogs", "context", "rubrics"):
        assert f"agentledger.ledger.{heavy}" not in imported, heavy
