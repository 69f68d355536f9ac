"""Transcript-backed signals: windows, token backfill, tool-error rate (spec §4.7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agentledger.sources.transcripts.parse import Invalid, fact, parse_go_time

from .conftest import TESTDATA, need_fixtures, run_cli, wait_until


def rows(out: str) -> dict[str, dict]:
    return {r["signal"]: r for r in json.loads(out)["breakdown"]}


@pytest.fixture
def scenario(tmp_path: Path, make_repo):
    """Iteration 1 commits at 03:30, iteration 2 at 05:00 (UTC), iteration 3 does not resolve."""
    need_fixtures()
    repo = make_repo()
    c1 = repo.commit("one", {"a": "1"}, date="2026-05-17T03:30:00Z")
    c2 = repo.commit("two", {"b": "2"}, date="2026-05-17T05:00:00Z")
    log = tmp_path / "log"
    log.mkdir()
    for n, sha in ((1, c1), (2, c2), (3, "abc1234")):
        (log / f"iter-{n}.yaml").write_text(f"schema_version: 2\niteration: {n}\ncommit: {sha}\n")

    def run(*transcript_dirs: str, cmd: tuple[str, ...] = ("ingest", "--once")) -> list[str]:
        args = ["--iteration-log", str(log), "--repo", str(repo.path), "--db", str(tmp_path / "l.sqlite")]
        for d in transcript_dirs:
            shutil.copytree(TESTDATA / d, tmp_path / d, dirs_exist_ok=True)
            args += ["--transcripts", str(tmp_path / d)]
        return [*cmd, *args]

    return log, run, tmp_path


def test_claude_window_backfill_and_tool_errors(scenario) -> None:
    log, run, tmp = scenario
    code, _, err = run_cli(*run("backfill_claude"))
    assert code == 0, err
    args = run("backfill_claude", cmd=())
    two = rows(run_cli("score", "2", "--json", *args)[1])
    assert two["token_efficiency"]["detail"] == "backfilled from 1 transcript turn(s): cache_hit_rate 0.750"
    assert two["token_efficiency"]["sub_score"] == 0.75
    assert two["correction_pressure"]["detail"] == "0 retries, 0 user corrections, 33% tool-error rate"
    assert two["correction_pressure"]["sub_score"] == 1.0 / (1.0 + 2.0 * (1 / 3))
    one = rows(run_cli("score", "1", "--json", *args)[1])  # open on the left: (none, 03:30]
    assert one["token_efficiency"]["detail"] == "backfilled from 1 transcript turn(s): cache_hit_rate 0.000"
    three = rows(run_cli("score", "3", "--json", *args)[1])
    assert three["token_efficiency"]["detail"] == "commit time unresolvable; cannot window the transcript"
    assert three["correction_pressure"]["detail"] == "0 retries, 0 user corrections"
    # the line that is not JSON is quarantined with its line number; the rest counted
    q = json.loads(run_cli("quarantine", "--json", *args)[1])
    assert [(r["path"], r["line"]) for r in q] == [("session.jsonl", 7)]


def test_codex_and_mixed(scenario) -> None:
    log, run, tmp = scenario
    assert run_cli(*run("backfill_codex"))[0] == 0
    two = rows(run_cli("score", "2", "--json", *run("backfill_codex", cmd=()))[1])
    assert two["token_efficiency"]["detail"] == "backfilled from 2 transcript turn(s): cache_hit_rate 0.857"
    assert two["correction_pressure"]["detail"] == "0 retries, 0 user corrections"
    assert run_cli(*run("backfill_mixed"))[0] == 0
    two = rows(run_cli("score", "2", "--json", *run("backfill_mixed", cmd=()))[1])
    assert two["token_efficiency"]["detail"] == "backfilled from 2 transcript turn(s): cache_hit_rate 0.667"
    assert two["correction_pressure"]["detail"] == "0 retries, 0 user corrections, 100% tool-error rate"


def test_native_tokens_win_and_new_transcript_lines_rescore_only_their_window(scenario) -> None:
    log, run, tmp = scenario
    (log / "iter-1.yaml").write_text((log / "iter-1.yaml").read_text() + "session_tokens:\n  cache_hit_rate: 0.5\n")
    assert run_cli(*run("backfill_claude"))[0] == 0
    args = run("backfill_claude", cmd=())
    assert rows(run_cli("score", "1", "--json", *args)[1])["token_efficiency"]["detail"] == \
        "native session_tokens: cache_hit_rate 0.500"
    before = {n: (log / f"iter-{n}.score.yaml").stat().st_mtime_ns for n in (1, 2, 3)}
    with (tmp / "backfill_claude" / "session.jsonl").open("a") as fh:  # a new turn inside (03:30, 05:00]
        fh.write('{"type":"assistant","timestamp":"2026-05-17T04:30:00Z","message":{"usage":'
                 '{"input_tokens":1,"output_tokens":1,"cache_read_input_tokens":100,"cache_creation_input_tokens":0}}}\n')
    out = json.loads(run_cli("ingest", "--once", "--json", *args)[1])
    assert out["scored"] == 1 and out["sidecars_written"] == 1
    after = {n: (log / f"iter-{n}.score.yaml").stat().st_mtime_ns for n in (1, 2, 3)}
    assert after[1] == before[1] and after[3] == before[3] and after[2] != before[2]
    assert "backfilled from 2 transcript turn(s): cache_hit_rate 0.800" in (log / "iter-2.score.yaml").read_text()


@pytest.mark.parametrize("line,expected", [
    (b'{"Type":"assistant","TIMESTAMP":"2026-05-17T04:00:00Z","Message":{"USAGE":{"Input_Tokens":3}}}', (1, 3)),
    (b'{"type":"assistant","timestamp":"2026-05-17T04:00:00Z","timestamp":"bad","message":{"usage":{}}}', None),
    (b'{"type":"assistant","timestamp":"2026-05-17T04:00:00Z","message":{"usage":{"input_tokens":3.0}}}', None),
    (b'{"type":"user","timestamp":"2026-05-17T04:00:00Z","message":{"content":"plain text"}}', None),
    (b'{"type":"user","timestamp":"2026-05-17T04:00:00Z","message":{"content":[{"type":"tool_result","is_error":"yes"}]}}', None),
    (b'{"type":"assistant","timestamp":"2026-05-17T04:00:00Z","payload":null,"message":{"usage":{"input_tokens":3}}}', None),
    (b'{"type":"assistant","timestamp":"2026-05-17T04:00:00Z","message":{"usage":{"input_tokens":null}}}', (1, 0)),
    (b'null', None),
    (b'[1, 2]', None),
])
def test_go_json_rules(line: bytes, expected) -> None:
    f = fact(line)
    assert (None if f is None else (f.turns, f.input_tokens)) == expected


def test_not_json_is_invalid() -> None:
    for bad in (b"not even json", b'{"a": NaN}', b"\xef\xbb\xbf{}", b'{"a":1'):
        with pytest.raises(Invalid):
            fact(bad)
    assert parse_go_time("2026-05-17T07:05:00.1234567891Z") % 10**9 == 123456789


def test_vally_trajectories_as_opt_in_transcripts(tmp_path: Path, make_repo) -> None:
    fixtures = need_fixtures()
    repo = make_repo()
    c1 = repo.commit("one", {"a": "1"}, date="2026-07-31T11:00:00Z")
    c2 = repo.commit("two", {"b": "2"}, date="2026-07-31T12:00:00Z")
    log = tmp_path / "log"
    log.mkdir()
    for n, sha in ((1, c1), (2, c2)):
        (log / f"iter-{n}.yaml").write_text(f"schema_version: 2\niteration: {n}\ncommit: {sha}\n")
    runs = tmp_path / "vally" / "2026-07-31T11-17-14-108Z" / "baseline"
    runs.mkdir(parents=True)
    shutil.copy(fixtures / "vally" / "baseline__results.first-record.jsonl", runs / "results.jsonl")
    db = ["--db", str(tmp_path / "l.sqlite")]
    base = ["--iteration-log", str(log), "--repo", str(repo.path), *db]
    # first as a plain vally source: no transcript facts, the window is empty
    assert run_cli("ingest", "--once", "--vally", str(tmp_path / "vally"), *base)[0] == 0
    two = rows(run_cli("score", "2", "--json", *base)[1])
    assert two["token_efficiency"]["detail"] == "no transcript covers the iteration window"
    # opted in: its six token_usage events are turns, its tool results count
    opt = [*base, "--transcripts", f"vally:{tmp_path / 'vally'}"]
    assert run_cli("ingest", "--once", *opt)[0] == 0
    two = rows(run_cli("score", "2", "--json", *opt)[1])
    assert two["token_efficiency"]["detail"] == "backfilled from 6 transcript turn(s): cache_hit_rate 0.824"
    assert two["correction_pressure"]["detail"] == "0 retries, 0 user corrections, 57% tool-error rate"
    (r,) = json.loads(run_cli("runs", "--json", *db)[1])
    assert r["trials"] == 1  # read twice (plain, then with turns), counted once


def _long_lived(run):
    """A ledger that stays open across changes (as the daemon's), after its first scan."""
    from agentledger import config as C
    from agentledger.ledger import Ledger

    args = run("backfill_claude", cmd=())
    cfg = C.with_overrides(C.load(None, env={}), db=args[args.index("--db") + 1],
                           iteration_log=args[args.index("--iteration-log") + 1],
                           repo=args[args.index("--repo") + 1], transcripts=[args[args.index("--transcripts") + 1]])
    led = Ledger(cfg)
    led.scan_all()
    return led, cfg.iteration_logs[0], args


def test_in_process_appends_keep_window_totals_fresh(scenario) -> None:
    """One long-lived ledger (as the daemon): each append must reach the window sums."""
    log, run, tmp = scenario
    led, src, _ = _long_lived(run)
    for k in range(3):
        with (tmp / "backfill_claude" / "session.jsonl").open("a") as fh:
            fh.write('{"type":"user","timestamp":"2026-05-17T04:4%d:00Z","message":{"content":'
                     '[{"type":"tool_result","is_error":true}]}}\n' % k)
        led.ingest_transcripts(tmp / "backfill_claude")
        led.rescore(src)
        assert f"{round(100 * (2 + k) / (4 + k))}% tool-error rate" in (log / "iter-2.score.yaml").read_text()
    led.close()


def test_window_totals_see_lines_another_process_ingested(scenario) -> None:
    """The close-task hook (``agentledger score N``) tails transcripts in its own
    process while the daemon runs: the daemon's window sums must not go stale."""
    log, run, tmp = scenario
    daemon, src, args = _long_lived(run)
    assert "33% tool-error rate" in (log / "iter-2.score.yaml").read_text()
    with (tmp / "backfill_claude" / "session.jsonl").open("a") as fh:
        fh.write('{"type":"user","timestamp":"2026-05-17T04:40:00Z","message":{"content":'
                 '[{"type":"tool_result","is_error":true}]}}\n')
    code, out, err = run_cli("score", "1", "--json", *args)  # the hook: ingests the line, scores 1
    assert code == 0, err
    # the daemon wakes on the same append: nothing new to read, but the line is queued for scoring
    daemon.ingest_transcripts(tmp / "backfill_claude")
    daemon.rescore(src)
    assert "50% tool-error rate" in (log / "iter-2.score.yaml").read_text()
    daemon.close()


def test_window_sums_follow_appends_deletes_and_replacements(tmp_path: Path) -> None:
    """FactSums against SQL's SUM over the same windows after every kind of change
    the table sees: appends (the delta), a transcript read again from the start
    (its facts deleted, then re-inserted), a fact replaced in place, a new
    directory's facts, and enough appends to fold the delta into the base."""
    import random

    from agentledger.ledger.windows import FactSums
    from agentledger.store import db

    conn = db.connect(tmp_path / "l.sqlite")
    rng = random.Random(7)
    seq = offset = 0
    sums = FactSums(("a", "b"))
    sums.DELTA_MAX = 40
    cols = "turns, input_tokens, output_tokens, cache_read, cache_creation, tool_results, tool_errors"

    def add(source: str, file: str, n: int) -> None:
        nonlocal seq, offset
        seq += 1
        for _ in range(n):
            offset += 1
            conn.execute(f"INSERT OR REPLACE INTO transcript_facts (source, file, byte_offset, ts_ns, kind, {cols}, seq)"
                         " VALUES (?,?,?,?,'claude',?,?,?,?,?,?,?,?)",
                         (source, file, offset, rng.randrange(1000), *(rng.randrange(5) for _ in range(7)), seq))

    def check() -> None:
        sums.refresh(conn)
        for _ in range(30):
            lo = rng.choice([None, rng.randrange(1000)])
            hi = rng.randrange(1000)
            want = conn.execute(
                f"SELECT {', '.join(f'coalesce(sum({c}), 0)' for c in cols.split(', '))} FROM transcript_facts"
                " WHERE source IN ('a', 'b') AND (? IS NULL OR ts_ns > ?) AND ts_ns <= ?", (lo, lo, hi)).fetchone()
            assert sums.total(lo, hi) == (tuple(want) if lo is None or hi > lo else (0,) * 7)

    add("a", "x", 200)
    check()
    for _ in range(5):  # appends: kept in the delta
        add("a", "x", 3)
        check()
    assert sums.fresh
    conn.execute("DELETE FROM transcript_facts WHERE source = 'a' AND file = 'x'")  # read again from the start
    add("a", "x", 50)
    check()
    row = conn.execute("SELECT byte_offset FROM transcript_facts LIMIT 1").fetchone()
    seq += 1
    conn.execute("UPDATE transcript_facts SET tool_errors = tool_errors + 9, seq = ? WHERE byte_offset = ?",
                 (seq, row[0]))  # what INSERT OR REPLACE of one key leaves: same count, a higher seq
    check()
    add("b", "y", 10)
    add("c", "z", 10)  # another source's facts are not this one's
    check()
    for _ in range(20):  # past DELTA_MAX: folded into the base
        add("b", "y", 5)
        check()
    assert len(sums.fresh) <= sums.DELTA_MAX
    conn.close()


# -- the last line without a newline (spec: "read a final line that lacks a \n") -------------
USER_ERR = ('{"type":"user","timestamp":"2026-05-17T04:20:00.000Z","message":{"role":"user","content":'
            '[{"type":"tool_result","tool_use_id":"t9","is_error":true}]}}')
USER_OK = ('{"type":"user","timestamp":"2026-05-17T04:30:00.000Z","message":{"role":"user","content":'
           '[{"type":"tool_result","tool_use_id":"t10","is_error":false}]}}')


def clean_facts(path: Path) -> list[tuple]:
    """The facts of a whole file read the way the rubric reads it, in one go."""
    out = []
    offset = 0
    for raw in path.read_bytes().split(b"\n"):
        data = raw[:-1] if raw.endswith(b"\r") else raw
        if data:
            try:
                f = fact(data)
            except Invalid:
                f = None
            if f is not None:
                out.append((offset, f.ts_ns, f.kind, f.input_tokens, f.output_tokens, f.cache_read,
                            f.cache_creation, f.turns, f.tool_results, f.tool_errors))
        offset += len(raw) + 1
    return out


def ledger_facts(db: Path, file: str = "session.jsonl") -> list[tuple]:
    import sqlite3

    with sqlite3.connect(db) as c:
        return [tuple(r) for r in c.execute(
            "SELECT byte_offset, ts_ns, kind, input_tokens, output_tokens, cache_read, cache_creation, turns,"
            " tool_results, tool_errors FROM transcript_facts WHERE file = ? ORDER BY byte_offset", (file,))]


def test_a_complete_last_line_without_newline_counts(scenario) -> None:
    """The s4 shape: the window's last line is a tool error and has no newline."""
    log, run, tmp = scenario
    args = run("backfill_claude", cmd=())
    session = tmp / "backfill_claude" / "session.jsonl"
    session.write_bytes(session.read_bytes() + USER_ERR.encode())  # no newline after it
    assert run_cli("ingest", *args)[0] == 0
    two = rows(run_cli("score", "2", "--json", *args)[1])
    # 4 tool results in (03:30, 05:00], 2 of them errors (one on the unterminated line)
    assert two["correction_pressure"]["detail"] == "0 retries, 0 user corrections, 50% tool-error rate"
    assert ledger_facts(tmp / "l.sqlite") == clean_facts(session)


@pytest.mark.parametrize("then", [
    [b"\n"],                                    # the newline arrives later
    [b"   ", b"\r\n"],                          # whitespace, then the newline: still the same record
    [b"\n" + USER_OK.encode() + b"\n"],         # the newline and another line
    [b"trailing garbage\n"],                    # the same line continues: now it is not JSON at all
    [b'{"type":"x"}', b"\n"],                   # continues into two objects on one line: invalid
    [USER_OK.encode()[:40], USER_OK.encode()[40:] + b"\n"],  # a second line written in two pieces
])
def test_an_open_last_line_is_counted_exactly_once_whatever_follows(scenario, then) -> None:
    log, run, tmp = scenario
    args = run("backfill_claude", cmd=())
    session = tmp / "backfill_claude" / "session.jsonl"
    session.write_bytes(session.read_bytes() + USER_ERR.encode())
    assert run_cli("ingest", *args)[0] == 0
    assert ledger_facts(tmp / "l.sqlite") == clean_facts(session)
    for piece in then:
        with session.open("ab") as fh:
            fh.write(piece)
        assert run_cli("ingest", *args)[0] == 0
    assert ledger_facts(tmp / "l.sqlite") == clean_facts(session)
    assert run_cli("rebuild", "--db", str(tmp / "l.sqlite"))[0] == 0
    assert ledger_facts(tmp / "l.sqlite") == clean_facts(session)
    # the sidecars equal those of a ledger that read the final file in one go
    sidecars = {p.name: p.read_bytes() for p in log.glob("*.score.yaml")}
    for p in log.glob("*.score.yaml"):
        p.unlink()
    fresh = [a if a != str(tmp / "l.sqlite") else str(tmp / "fresh.sqlite") for a in args]
    assert run_cli("ingest", *fresh)[0] == 0
    assert {p.name: p.read_bytes() for p in log.glob("*.score.yaml")} == sidecars


def test_sigkill_between_open_line_writes_ends_with_the_clean_facts(tmp_path: Path, make_repo) -> None:
    """A writer appends in pieces (some ending mid-line, some after a complete object
    with no newline) while `agentledger ingest` runs and is killed at random moments."""
    import random
    import subprocess
    import sys
    import time

    from agentledger.example import synth

    rng = random.Random(12)
    repo = make_repo()
    repo.commit("one", {"a": "1"}, date="2025-10-09T09:00:00Z")
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text(f"schema_version: 2\niteration: 1\ncommit: {repo.git('rev-parse', 'HEAD')}\n")
    source = tmp_path / "src.jsonl"
    synth.claude_transcript(source, 120, seed=3)
    data = source.read_bytes()
    tdir = tmp_path / "t"
    tdir.mkdir()
    session = tdir / "session.jsonl"
    cuts = sorted(rng.sample(range(1, len(data)), 24))
    newline_ends = [i for i in range(len(data)) if data[i:i + 1] == b"\n"]
    cuts += rng.sample(newline_ends, 8)  # cuts just before a newline: a complete, open last line
    cuts = sorted(set(cuts)) + [len(data)]
    args = ["--iteration-log", str(log), "--repo", str(repo.path), "--db", str(tmp_path / "l.sqlite"),
            "--transcripts", str(tdir)]
    done = 0
    kills = 0

    def checkpoint():
        import sqlite3

        if not (tmp_path / "l.sqlite").exists():
            return None
        try:
            with sqlite3.connect(f"file:{tmp_path / 'l.sqlite'}?mode=ro", uri=True) as c:
                return c.execute("SELECT byte_offset, open_line FROM source_checkpoints WHERE path = ?",
                                 ("session.jsonl",)).fetchone()
        except sqlite3.Error:
            return None

    for cut in cuts:
        with session.open("ab") as fh:
            fh.write(data[done:cut])
        done = cut
        before = checkpoint()
        proc = subprocess.Popen([sys.executable, "-m", "agentledger", "ingest", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        how = rng.random()
        if how < 0.4:  # right after it committed what it read (a condition, not a delay)
            wait_until(lambda: checkpoint() != before or proc.poll() is not None, 60, 0.005)
        elif how < 0.7:
            time.sleep(rng.uniform(0.0, 0.6))  # a random moment of the run
        if how < 0.7:
            kills += proc.poll() is None
            proc.kill()
        proc.wait()
    assert kills >= 5
    assert run_cli("ingest", *args)[0] == 0
    assert session.read_bytes() == data
    assert ledger_facts(tmp_path / "l.sqlite") == clean_facts(session)
