"""The command line, as users and the close-task hook call it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REAL_LOG, REFERENCE, TESTDATA, cli_subprocess, copy_log, empty_ledger, need_fixtures, run_cli


def adhoc(log: Path, repo: Path, db: Path) -> list[str]:
    return ["--iteration-log", str(log), "--repo", str(repo), "--db", str(db)]


def test_score_n_json_and_idempotence(tmp_path: Path, empty_repo) -> None:
    need_fixtures()
    log = tmp_path / "log"
    copy_log(REAL_LOG, log)
    args = adhoc(log, empty_repo.path, tmp_path / "l.sqlite")
    code, out, err = run_cli("score", "66", "--json", *args)
    assert code == 0, err
    r = json.loads(out)
    assert r["iteration"] == 66 and r["score_band"] == "excellent" and r["rubric_version"] == "2.1.0"
    assert r["score_value"] == 0.8591549295774648
    assert r["sidecar_path"] == str(log / "iter-66.score.yaml") and r["sidecar_written"] is True
    assert r["session_sidecar_path"] == str(log / "session-0bff2f58-962f-4852-abaf-38cd6151218e.score.yaml")
    ref = REFERENCE / "rubric-2.1.0" / "real-iteration-log"
    assert (log / "iter-66.score.yaml").read_bytes() == (ref / "iter-66.score.yaml").read_bytes()
    assert Path(r["session_sidecar_path"]).read_bytes() == (ref / Path(r["session_sidecar_path"]).name).read_bytes()
    # Only iteration 66 (and its session) was scored: the hook never rescans the log.
    assert sorted(p.name for p in log.glob("*.score.yaml")) == [
        "iter-66.score.yaml", "session-0bff2f58-962f-4852-abaf-38cd6151218e.score.yaml"]
    mtime = (log / "iter-66.score.yaml").stat().st_mtime_ns
    code, out, _ = run_cli("score", "66", "--json", *args)
    assert json.loads(out)["rescored"] is False and json.loads(out)["sidecar_written"] is False
    assert (log / "iter-66.score.yaml").stat().st_mtime_ns == mtime

    code, out, _ = run_cli("score", "66", *args)
    assert code == 0 and "iter-66: 0.8592 excellent" in out and "remediate: iteration-close.R1.1" in out


def test_score_missing_iteration_fails(tmp_path: Path, empty_repo) -> None:
    log = tmp_path / "log"
    log.mkdir()
    code, _, err = run_cli("score", "5", *adhoc(log, empty_repo.path, tmp_path / "l.sqlite"))
    assert code == 1 and "iter-5.yaml not found" in err


def test_session_id_path_traversal_is_refused(tmp_path: Path, empty_repo) -> None:
    log = tmp_path / "a" / "b" / "log"
    log.mkdir(parents=True)
    (log / "iter-1.yaml").write_text(
        "schema_version: 2\niteration: 1\nagent:\n  session_id: ../../etc/x\nimpl:\n  scope_note: on-target\n")
    args = adhoc(log, empty_repo.path, tmp_path / "l.sqlite")
    code, out, err = run_cli("ingest", "--once", *args)
    assert code == 0, err
    assert (log / "iter-1.score.yaml").is_file()  # the iteration itself still scores
    assert not list(tmp_path.rglob("session-*")) and not (tmp_path / "a" / "etc").exists()
    code, out, _ = run_cli("quarantine", "--json", *args)
    (q,) = json.loads(out)
    assert q["path"] == "iter-1.yaml" and '"../../etc/x"' in q["reason"] and "refused" in q["reason"]


def test_query_is_read_only(tmp_path: Path) -> None:
    db = empty_ledger(tmp_path / "l.sqlite")
    code, out, _ = run_cli("query", "SELECT count(*) AS n FROM events", "--json", "--db", str(db))
    assert code == 0 and json.loads(out) == [{"n": 0}]
    for sql in ("DELETE FROM events", "INSERT INTO ledger_state VALUES ('a','b')", "DROP TABLE scores",
                "CREATE TABLE x (a)"):
        code, _, err = run_cli("query", sql, "--db", str(db))
        assert code == 1 and "query refused" in err and "read-only" in err, sql
    code, out, _ = run_cli("query", "SELECT 1 AS a, 'x' AS b", "--csv", "--db", str(db))
    assert out.splitlines() == ["a,b", "1,x"]


def test_query_creates_no_file_and_says_read_only(tmp_path: Path) -> None:
    """ATTACH creates the file it names and VACUUM INTO leaves an empty one behind unless
    refused before SQLite opens anything; a PRAGMA that sets is refused as read-only."""
    db = empty_ledger(tmp_path / "l.sqlite")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = {
        f"ATTACH DATABASE '{elsewhere / 'x.db'}' AS x": "ATTACH and VACUUM INTO are refused",
        f"VACUUM INTO '{elsewhere / 'y.db'}'": "ATTACH and VACUUM INTO are refused",
        "VACUUM": "VACUUM is refused",
        "DETACH DATABASE main": "refused",
        "PRAGMA journal_mode=delete": "PRAGMA journal_mode = delete is refused: the ledger is read-only",
        "PRAGMA user_version = 7": "read-only",
    }
    for sql, why in refused.items():
        proc = cli_subprocess("query", sql, "--db", str(db))
        code, err = proc.returncode, proc.stderr
        assert code == 1 and why in err, (sql, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert list(elsewhere.iterdir()) == []
    code, out, _ = run_cli("query", "SELECT name FROM pragma_table_info('events') WHERE name = 'seq'", "--json",
                           "--db", str(db))
    assert code == 0 and json.loads(out) == [{"name": "seq"}]
    code, out, _ = run_cli("query", "PRAGMA table_info(events)", "--json", "--db", str(db))
    assert code == 0 and any(r["name"] == "seq" for r in json.loads(out))
    code, out, _ = run_cli("query", "PRAGMA journal_mode", "--json", "--db", str(db))
    assert code == 0 and json.loads(out) == [{"journal_mode": "wal"}]


def test_a_refused_sidecar_write_is_reported_once(tmp_path: Path, empty_repo) -> None:
    need_fixtures()
    log = tmp_path / "log"
    log.mkdir()
    shutil.copy(TESTDATA / "v2_sparse.yaml", log / "iter-65.yaml")
    (log / "iter-65.score.yaml").symlink_to(tmp_path / "target")
    proc = cli_subprocess("score", "65", *adhoc(log, empty_repo.path, tmp_path / "l.sqlite"))
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if "refusing to write" in ln]
    assert len(lines) == 1, proc.stderr
    assert not (tmp_path / "target").exists()


def test_status_and_quarantine_of_bad_fixtures(tmp_path: Path, empty_repo) -> None:
    need_fixtures()
    log = tmp_path / "log"
    log.mkdir()
    for name, n in (("bad_schema", 1), ("bad_v1", 3), ("bad_v2", 4), ("not_yaml", 0), ("v1_iter", 7)):
        shutil.copy(TESTDATA / f"{name}.yaml", log / f"iter-{n}.yaml")
    (log / "iter-9.yaml").mkdir()
    shutil.copy(TESTDATA / "iterlog_badhist" / "historical.yaml", log / "historical.yaml")
    args = adhoc(log, empty_repo.path, tmp_path / "l.sqlite")
    code, out, err = run_cli("ingest", "--once", "--json", *args)
    assert code == 0, err
    assert json.loads(out)["quarantined"] == 6 and json.loads(out)["scored"] == 1
    assert (log / "iter-7.score.yaml").is_file()
    code, out, _ = run_cli("quarantine", "--json", *args)
    reasons = {q["path"]: q for q in json.loads(out)}
    assert set(reasons) == {"iter-0.yaml", "iter-1.yaml", "iter-3.yaml", "iter-4.yaml", "iter-9.yaml",
                            "historical.yaml"}
    assert reasons["iter-1.yaml"]["reason"] == "unsupported iteration-log schema_version 99"
    assert reasons["iter-3.yaml"]["reason"] == ("parse v1 iteration entry: yaml: unmarshal errors:\n"
                                                "  line 3: cannot unmarshal !!str `not an ...` into int")
    assert reasons["iter-3.yaml"]["line"] == 3
    assert reasons["iter-0.yaml"]["reason"].endswith("cannot unmarshal !!seq into scoring.schemaProbe")
    assert reasons["iter-9.yaml"]["reason"].endswith("is a directory")
    code, out, _ = run_cli("status", "--json", *args)
    st = json.loads(out)
    assert st["quarantined"] == 6 and st["iterations"] == 1 and st["active_rubric"] == "2.1.0"

    # The next valid write of a quarantined file is ingested and clears its quarantine.
    # (a record is the file named for it: v2_sparse.yaml says iteration 65, so it is made iteration 3's)
    (log / "iter-3.yaml").write_text((TESTDATA / "v2_sparse.yaml").read_text().replace("iteration: 65",
                                                                                       "iteration: 3", 1))
    code, out, _ = run_cli("ingest", "--once", "--json", *args)
    assert json.loads(out)["scored"] == 1 and (log / "iter-3.score.yaml").is_file()
    code, out, _ = run_cli("quarantine", "--json", *args)
    assert "iter-3.yaml" not in {q["path"] for q in json.loads(out)}
    code, out, _ = run_cli("quarantine", "--all", "--json", *args)
    assert any(q["path"] == "iter-3.yaml" and q["resolved_seq"] for q in json.loads(out))


def test_salvaged_log_ingests_without_crash(tmp_path: Path, make_repo) -> None:
    fixtures = need_fixtures()
    root = tmp_path / "salvaged"
    shutil.copytree(fixtures / "dot-agents-salvaged", root)
    make_repo("salvaged")  # git init inside the copy
    args = adhoc(root / ".agents/active/iteration-log", root, tmp_path / "l.sqlite")
    code, out, err = run_cli("ingest", "--once", "--json", *args)
    assert code == 0, err
    report = json.loads(out)
    assert report["scored"] == 66 and report["quarantined"] == 2
    code, out, _ = run_cli("quarantine", "--json", *args)
    paths = sorted(q["path"] for q in json.loads(out))
    assert paths == [".agents/workflow/plans/graph-bridge-command-readiness/TASKS.yaml", "historical.yaml"]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_cli("ingest", "--db", str(tmp_path / "l.sqlite"))[0] == 2  # no sources
    assert run_cli("ingest", "--once", "--db", str(tmp_path / "l.sqlite"))[0] == 2  # no sources
    assert run_cli("score", "x")[0] == 2
    # a read command does not activate a rubric: --rubric there is a mistake, said (it exited 0 silently)
    code, _, err = run_cli("status", "--rubric", "9.9.9", "--db", str(empty_ledger(tmp_path / "l.sqlite")))
    assert code == 2 and "--rubric goes with a command that scores" in err
    code, _, err = run_cli("ingest", "--once", "--rubric", "9.9.9", "--iteration-log", str(tmp_path),
                           "--repo", str(tmp_path), "--db", str(tmp_path / "l.sqlite"))
    assert code == 2 and "unknown rubric version" in err


def test_config_file_env_and_flags(tmp_path: Path, empty_repo, monkeypatch) -> None:
    from agentledger import config as C

    log = tmp_path / "log"
    log.mkdir()
    cfgfile = tmp_path / "agentledger.toml"
    cfgfile.write_text(f'[store]\npath = "ledger.sqlite"\n[scoring]\nrubric = "2.0.2"\n'
                       f'[[iteration_logs]]\nname = "main"\npath = "{log}"\nrepo = "{empty_repo.path}"\n')
    cfg = C.load(str(cfgfile), env={})
    assert cfg.store.path == tmp_path / "ledger.sqlite" and cfg.scoring.rubric == "2.0.2"
    assert cfg.iteration_logs[0].name == "main" and cfg.iteration_logs[0].trunk == "master"
    cfg = C.load(str(cfgfile), env={"AGENTLEDGER_SCORING_RUBRIC": "2.1.0", "AGENTLEDGER_STORE_SYNCHRONOUS": "NORMAL"})
    assert cfg.scoring.rubric == "2.1.0" and cfg.store.synchronous == "NORMAL"
    cfg = C.with_overrides(cfg, rubric="3.0.0", db=str(tmp_path / "x.sqlite"))
    assert cfg.explicit_rubric == "3.0.0" and cfg.scoring.rubric == "2.1.0"  # a flag: an activation
    assert cfg.store.path == tmp_path / "x.sqlite"
    monkeypatch.chdir(tmp_path)
    assert C.load(None, env={}).origin == "agentledger.toml"  # ./agentledger.toml is found
    cfgfile.write_text("[scoring]\nrubrik = '2.1.0'\n")
    try:
        C.load(str(cfgfile), env={})
    except C.ConfigError as exc:
        assert "rubrik" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("unknown key accepted")


def test_example_config_is_valid_and_complete() -> None:
    import tomllib
    from dataclasses import fields

    from agentledger import config as C

    root = Path(__file__).resolve().parents[1]
    text = (root / "config.example.toml").read_text()
    data = tomllib.loads(text)
    cfg = C.load(str(root / "config.example.toml"), env={})
    assert cfg.iteration_logs and cfg.vally and cfg.annotations
    for section, cls in C._SECTIONS.items():
        for f in fields(cls):
            assert f.name in data[section], f"config.example.toml does not document [{section}] {f.name}"


def test_python_m_and_console_script(tmp_path: Path) -> None:
    proc = cli_subprocess("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("agentledger ")
    proc = cli_subprocess("status", "--json", "--db", str(empty_ledger(tmp_path / "l.sqlite")))
    assert proc.returncode == 0 and json.loads(proc.stdout)["events"] == 0


_EXIT_PROBE = """
import atexit, os, sys
_here = os.path.dirname(os.path.abspath(__file__))

def _handler():
    with open(os.path.join(_here, "exit-handler-ran"), "a") as f:
        f.write("x")

atexit.register(_handler)
# the interpreter's teardown announces itself to audit hooks as it clears the interpreter
_fd = os.open(os.path.join(_here, "torn-down"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

def _audit(event, args, _write=os.write, _fd=_fd):
    if event in ("cpython.PyInterpreterState_Clear", "cpython._PySys_ClearAuditHooks"):
        _write(_fd, b"x")

sys.addaudithook(_audit)
"""


def test_a_command_ends_without_the_teardown_but_with_its_exit_handlers_and_all_its_output(tmp_path: Path) -> None:
    """``__main__.leave``: the process ends once the command returns, without freeing every
    module (the teardown's audit event never comes), yet every exit handler runs,
    the exit code is the command's and all of a large output reaches a pipe. While another
    thread runs, it leaves the exit to the interpreter, which waits for that thread."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(_EXIT_PROBE)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")]))}
    db = empty_ledger(tmp_path / "l.sqlite")
    rows = 200_000  # a few MB of JSON: many times a pipe's buffer
    sql = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) SELECT i FROM n"
    proc = cli_subprocess("query", sql, "--json", "--db", str(db), env=env)
    assert proc.returncode == 0, proc.stderr
    assert [r["i"] for r in json.loads(proc.stdout)] == list(range(1, rows + 1))
    assert (probe / "exit-handler-ran").read_text() == "x" and (probe / "torn-down").read_text() == ""

    (probe / "exit-handler-ran").unlink()
    proc = cli_subprocess("query", "SELECT * FROM no_such_table", "--db", str(db), env=env)
    assert proc.returncode not in (0, None) and "no_such_table" in proc.stderr
    assert (probe / "exit-handler-ran").read_text() == "x" and (probe / "torn-down").read_text() == ""

    (probe / "exit-handler-ran").unlink()
    script = ("import threading, agentledger.__main__ as m\n"
              "done = threading.Event()\n"
              "t = threading.Thread(target=done.wait)\n"
              "t.start()\n"
              "m.leave(5)\n"
              "print('left to the interpreter', flush=True)\n"
              "done.set()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})
    assert proc.returncode == 0 and proc.stdout == "left to the interpreter\n", proc.stderr
    assert (probe / "exit-handler-ran").read_text() == "x" and (probe / "torn-down").read_text() != ""


def test_score_path_imports_stay_lean(tmp_path: Path, empty_repo) -> None:
    """The close-task hook must not pay for the daemon's libraries (`python -X importtime`)."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text("schema_version: 1\niteration: 1\nscope_note: on-target\n")
    args = ["score", "1", *adhoc(log, empty_repo.path, tmp_path / "l.sqlite")]
    assert cli_subprocess(*args).returncode == 0  # first run creates and migrates the ledger
    # the hook's case: an iteration just written, so the YAML parser is loaded (a scan with
    # nothing to read does not load it)
    (log / "iter-2.yaml").write_text("schema_version: 1\niteration: 2\nscope_note: on-target\n")
    args[1] = "2"
    proc = cli_subprocess(*args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "agentledger" in imported and "yaml" in imported
    heavy = imported & {"pydantic", "structlog", "sqlite_utils", "click", "rich", "watchfiles", "apscheduler"}
    assert not heavy, f"score path imports {sorted(heavy)}"


def test_nan_cache_hit_rate_scores_and_prints(tmp_path: Path, make_repo) -> None:
    """A `.nan` in a record flows through scoring, the ledger (JSON has no NaN) and the sidecar."""
    repo = make_repo()
    sha = repo.commit("one", {"a": "1"})
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text(f"schema_version: 2\niteration: 1\ncommit: {sha}\n"
                                     "session_tokens:\n  cache_hit_rate: .nan\n")
    args = adhoc(log, repo.path, tmp_path / "l.sqlite")
    code, out, err = run_cli("score", "1", *args)
    assert code == 0, err
    assert "native session_tokens: cache_hit_rate NaN" in out
    text = (log / "iter-1.score.yaml").read_text()
    assert "sub_score: .nan" in text and "value: .nan" in text and "band: poor" in text
    code, out, _ = run_cli("rebuild", *args)
    assert code == 0 and (log / "iter-1.score.yaml").read_text() == text


@pytest.mark.parametrize("name,quarantined,scored", [
    ("iterlog_badfile", {"iter-9.yaml"}, 0),
    ("iterlog_badhist", {"historical.yaml"}, 0),
    ("iterlog_histdir", {"historical.yaml"}, 0),
    ("iterlog_unreadable", {"iter-9.yaml"}, 0),
    ("iterlog", set(), 3),
])
def test_fixture_directories_as_shipped(tmp_path: Path, empty_repo, name: str, quarantined: set, scored: int) -> None:
    """The reference stops at the first bad file; we quarantine it and carry on."""
    need_fixtures()
    log = tmp_path / name
    shutil.copytree(TESTDATA / name, log)
    args = adhoc(log, empty_repo.path, tmp_path / "l.sqlite")
    code, out, err = run_cli("ingest", "--once", "--json", *args)
    assert code == 0, err
    assert json.loads(out)["scored"] == scored
    code, out, _ = run_cli("quarantine", "--json", *args)
    assert {q["path"] for q in json.loads(out)} == quarantined


BAD_ARGUMENTS = [  # (arguments, exit status): 1 nothing there / cannot, 2 a bad flag or value
    (["status", "--db", "{tmp}/nowhere/x.sqlite"], 1),
    (["quarantine", "--db", "{tmp}/none.sqlite"], 1),
    (["query", "SELECT 1", "--db", "{tmp}/none.sqlite"], 1),
    (["ingest", "--iteration-log", "{tmp}/nope", "--repo", "{tmp}", "--db", "{db}"], 2),
    (["ingest", "--iteration-log", "{tmp}/log", "--repo", "{tmp}", "--transcripts", "/nonexistent/claude",
      "--db", "{db}"], 2),
    (["ingest", "--vally", "/nonexistent/vally", "--db", "{db}"], 2),
    (["ingest", "--annotations", "/nonexistent/annotations", "--db", "{db}"], 2),
    (["ingest", "--db", "{db}"], 2),
    (["--rubric", "9.9", "ingest", "--iteration-log", "{tmp}/log", "--repo", "{tmp}", "--db", "{db}"], 2),
    (["--rubric", "9.9", "rebuild", "--db", "{db}"], 2),
    (["score", "x"], 2),
    (["score", "99", "--iteration-log", "{tmp}/log", "--repo", "{tmp}", "--db", "{db}"], 1),
    (["trials", "--limit", "-5", "--db", "{db}"], 2),
    (["trajectories", "--limit", "x", "--db", "{db}"], 2),
    (["trajectories", "--format", "v9", "--db", "{db}"], 2),
    (["trajectory", "zzz", "--db", "{db}"], 1),
    (["lint", "{tmp}/nonexist.md"], 2),
    (["report", "--since", "yesterday", "-o", "{tmp}/r.html", "--db", "{db}"], 2),
    (["report", "--session", "nope", "-o", "{tmp}/r.html", "--db", "{db}"], 1),
    (["report", "-o", "/nonexistent/dir/r.html", "--db", "{db}"], 1),
    (["export", "--type", "score.compted", "--db", "{db}"], 2),
    (["export", "-o", "/nonexistent/dir/e.jsonl", "--db", "{db}"], 1),
    (["export", "--format", "xml", "--db", "{db}"], 2),
    (["import", "/nonexistent.jsonl", "--db", "{db}"], 1),
    (["query", "ATTACH DATABASE '{tmp}/x.db' AS x", "--db", "{db}"], 1),
    (["query", "SELEC nonsense", "--db", "{db}"], 1),
    (["ui", "--port", "http", "--db", "{db}"], 2),
    (["ship", "--db", "{db}"], 2),
    (["ship", "--central", "mysql://x@y/z", "--db", "{db}"], 2),
    (["ship", "--central", "postgresql://u:pw@127.0.0.1:1/x?connect_timeout=2", "--db", "{tmp}/none.sqlite"], 1),
    (["central", "frob", "postgresql://x/y"], 2),
    (["central", "status"], 2),
    (["query", "--central", "not-a-url", "SELECT 1"], 2),
    (["query", "--db", "{db}"], 2),
    (["report", "--central", "-o", "{tmp}/r.html"], 2),
    (["nosuchcommand"], 2),
    (["--config", "/nonexistent/agentledger.toml", "status"], 2),
]


@pytest.mark.parametrize("argv, status", BAD_ARGUMENTS, ids=[" ".join(a[:3]) for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_fail_with_one_line_and_no_traceback(tmp_path: Path, argv: list[str], status: int) -> None:
    """Every command, given a bad argument: its documented exit status, exactly one line
    on stderr, no traceback, and no ledger or directory created by a read command."""
    db = empty_ledger(tmp_path / "l.sqlite")
    (tmp_path / "log").mkdir()
    args = [a.replace("{tmp}", str(tmp_path)).replace("{db}", str(db)) for a in argv]
    proc = cli_subprocess(*args, cwd=tmp_path)
    assert proc.returncode == status, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "none.sqlite").exists()


def test_typos_in_the_environment_fail_loudly(tmp_path: Path) -> None:
    db = str(empty_ledger(tmp_path / "l.sqlite"))
    proc = cli_subprocess("status", "--db", db, env={"AGENTLEDGER_SCORING_RUBRIK": "3.0.0"})
    assert proc.returncode == 2 and "did you mean AGENTLEDGER_SCORING_RUBRIC" in proc.stderr
    proc = cli_subprocess("status", "--db", db, env={"AGENTLEDGER_DAEMON_RECONCILE_SECONDS": "abc"})
    assert proc.returncode == 2 and proc.stderr.startswith("agentledger: error: $AGENTLEDGER_DAEMON_RECONCILE_SECONDS")


def test_an_empty_source_directory_is_warned_about(tmp_path: Path, empty_repo) -> None:
    (tmp_path / "log").mkdir()
    code, _, err = run_cli("ingest", "--iteration-log", str(tmp_path / "log"), "--repo", str(empty_repo.path),
                           "--db", str(tmp_path / "l.sqlite"))
    assert code == 0 and "no iter-N.yaml or historical.yaml here" in err


def test_a_scan_that_finds_nothing_changed_loads_no_yaml_parser(tmp_path: Path, empty_repo) -> None:
    """A re-ingest with nothing changed is the daemon's and cron's common case: it costs a
    listing and the stats, not the parser's import (~20 ms of a 0.3 s command), nor
    ctypes' (the sidecar writers' ``renameat2``, ~2 ms: nothing is written)."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text("schema_version: 1\niteration: 1\nscope_note: on-target\n")
    args = ["ingest", "--once", *adhoc(log, empty_repo.path, tmp_path / "l.sqlite")]
    assert cli_subprocess(*args).returncode == 0

    def imported_by(proc) -> set[str]:
        assert proc.returncode == 0, proc.stderr
        return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    quiet = imported_by(cli_subprocess(*args, env={"PYTHONPROFILEIMPORTTIME": "1"}))
    assert "agentledger.ledger" in quiet and "yaml" not in quiet and "ctypes" not in quiet
    (log / "iter-2.yaml").write_text("schema_version: 1\niteration: 2\nscope_note: on-target\n")
    assert "yaml" in imported_by(cli_subprocess(*args, env={"PYTHONPROFILEIMPORTTIME": "1"}))


def test_each_command_line_builds_the_parser_of_its_own_command() -> None:
    """``main`` builds only the flags of the command named first (COMMAND_GROUPS says
    where it lives): the map names every command of every group, and that one command's
    parser reads a command line as the whole parser does, help included."""
    from agentledger import cli

    whole = cli.build_parser()
    sub = next(a for a in whole._actions if a.dest == "command")
    assert set(sub.choices) == set(cli.COMMAND_GROUPS)
    for name, group in cli.COMMAND_GROUPS.items():
        alone = cli.build_parser(group, name)
        assert set(next(a for a in alone._actions if a.dest == "command").choices) == {name}
        assert alone._subparsers._group_actions[0].choices[name].format_help() == sub.choices[name].format_help()
    argv = ["ingest", "--once", "--db", "x.sqlite", "--iteration-log", "l", "--repo", "r", "--json"]
    assert vars(cli.build_parser("ingest", "ingest").parse_args(argv)) == vars(whole.parse_args(argv))


def test_help_lists_every_command_in_its_own_words() -> None:
    """`agentledger --help` (argparse formats each command's line with %, which "a 95 %
    interval" broke: a TypeError instead of the list) and each command's own help."""
    out = cli_subprocess("--help")
    assert out.returncode == 0, out.stderr
    from agentledger import cli

    assert set(cli.COMMAND_GROUPS) <= set(out.stdout.split())
    assert "with a 95 % interval" in " ".join(out.stdout.split())
    assert "with a 95 % interval" in " ".join(cli_subprocess("compare", "--help").stdout.split())


def test_a_command_logs_its_warnings_in_its_own_words_and_quiet_keeps_them_back(tmp_path: Path, empty_repo) -> None:
    """What the ledger logs at warning level reaches stderr as `agentledger: WARNING: …`,
    and `-q` keeps it back (errors only): the command line sets logging up for every
    command but the close-task hook that a service may answer."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text("iteration: [unclosed\n")
    args = ["ingest", "--iteration-log", str(log), "--repo", str(empty_repo.path)]
    loud = cli_subprocess(*args, "--db", str(tmp_path / "a.sqlite"))
    assert loud.returncode == 0, loud.stderr
    assert any(line.startswith("agentledger: WARNING: quarantined") for line in loud.stderr.splitlines()), loud.stderr
    quiet = cli_subprocess(*args, "--db", str(tmp_path / "b.sqlite"), "-q")
    assert quiet.returncode == 0 and "quarantined" not in quiet.stderr, quiet.stderr
