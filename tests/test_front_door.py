"""What a newcomer meets first: where configuration is found, `score N` inside a
dot-agents repository with nothing configured, `agentledger config`, log lines for a
terminal or for journald, query parameters, and `ui` on a busy or a free port."""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from agentledger.example import synth

from .conftest import cli_subprocess, empty_ledger, wait_until


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """No configuration from the machine running the tests: a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLEDGER_") or k == "AGENTLEDGER_TEST_RUN"}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"))
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentledger", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_config_lookup_order_cwd_then_user_then_system(tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    user = Path(env["XDG_CONFIG_HOME"]) / "agentledger" / "agentledger.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[scoring]\nrubric = "3.0.0"\n')
    out = json.loads(_run(["config", "--json"], work, env).stdout)
    assert out["config_file"] == str(user)
    assert {r["key"]: r for r in out["settings"]}["scoring.rubric"] == {
        "key": "scoring.rubric", "value": "3.0.0", "from": str(user)}
    (work / "agentledger.toml").write_text('[scoring]\nrubric = "2.0.2"\n')
    out = json.loads(_run(["config", "--json"], work, env).stdout)
    assert out["config_file"] == "agentledger.toml"
    assert {r["key"]: r["value"] for r in out["settings"]}["scoring.rubric"] == "2.0.2"
    env["AGENTLEDGER_SCORING_RUBRIC"] = "2.1.0"
    out = json.loads(_run(["--db", str(tmp_path / "x.sqlite"), "config", "--json"], work, env).stdout)
    settings = {r["key"]: r for r in out["settings"]}
    assert settings["scoring.rubric"]["from"] == "$AGENTLEDGER_SCORING_RUBRIC"
    assert settings["store.path"] == {"key": "store.path", "value": str(tmp_path / "x.sqlite"), "from": "--db"}
    assert out["looked_in"][-1] == "/etc/agentledger/agentledger.toml"


def test_score_n_inside_a_dot_agents_repository_needs_no_configuration(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 6)
    env = _clean_env(tmp_path)
    deep = gen.repo / "src" / "api"
    deep.mkdir(parents=True, exist_ok=True)
    proc = _run(["score", "4"], deep, env)
    assert proc.returncode == 0, proc.stderr
    assert "iter-4:" in proc.stdout and (gen.log / "iter-4.score.yaml").is_file()
    assert Path(env["XDG_STATE_HOME"], "agentledger", "ledger.sqlite").is_file()
    proc = _run(["score", "4"], tmp_path, env)  # outside any repository: says what to pass
    assert proc.returncode == 2 and "no source configured" in proc.stderr


def _drain(leader: int) -> bytes:
    """Everything written to a pty whose other end is closed (EIO marks the end)."""
    data = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk


def _format_seen(env: dict[str, str], tty: bool) -> str:
    code = "from agentledger.service.logs import resolve_format; print(resolve_format('auto'))"
    if not tty:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=follower, stderr=subprocess.DEVNULL)
        proc.wait(timeout=60)
        os.close(follower)
        follower = -1
        return _drain(leader).decode().strip()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


def test_log_format_follows_the_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    assert _format_seen(env, tty=True) == "console"
    assert _format_seen(env, tty=False) == "json"
    assert _format_seen({**env, "JOURNAL_STREAM": "8:12345"}, tty=True) == "json"


def test_query_named_parameters_and_json_lines(tmp_path: Path) -> None:
    db = str(empty_ledger(tmp_path / "l.sqlite"))
    proc = cli_subprocess("query", "SELECT :name AS name, :n + 1 AS next", "-p", "name", "it's \"quoted\"",
                          "-p", "n", "41", "--nl", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in proc.stdout.splitlines()] == [{"name": "it's \"quoted\"", "next": 42}]


def test_ui_refuses_a_busy_port_and_prints_the_real_one(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("datasette") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Datasette is missing (the [ui] extra; `make test` installs it)")
        pytest.skip("Datasette is the [ui] extra")
    db = str(empty_ledger(tmp_path / "l.sqlite"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = cli_subprocess("ui", "--port", str(busy.getsockname()[1]), "--db", db)
    assert proc.returncode == 1 and "Address already in use" in proc.stderr and "serving" not in proc.stderr
    ui = subprocess.Popen([sys.executable, "-m", "agentledger", "ui", "--port", "0", "--db", db],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = ui.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
        assert m and m.group(1) != "0", first
        url = f"http://127.0.0.1:{m.group(1)}/-/versions.json"

        def up() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False

        assert wait_until(up, 60)
    finally:
        ui.terminate()
        ui.wait(timeout=30)
        ui.stderr.close()


def _on_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run with stderr on a pty (a terminal) and stdout piped: (status, stdout, what was drawn)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=follower, text=True)
        out, _ = proc.communicate(timeout=300)
        os.close(follower)
        follower = -1
        drawn = _drain(leader)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return proc.returncode, out, drawn.decode(errors="replace")


def test_long_work_on_a_terminal_shows_counts_and_no_unknown_total(tmp_path: Path) -> None:
    """The bar goes to stderr (stdout stays the command's output), appears once the work
    has a count, and shows it; off a terminal nothing is drawn."""
    gen = synth.generate(tmp_path / "gen", 1200)
    args = [sys.executable, "-m", "agentledger", "ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
            "--db", str(tmp_path / "l.sqlite")]
    code, out, drawn = _on_terminal(args)
    assert code == 0 and "scoring" in drawn and "1,200/1,200" in drawn and "/?" not in drawn
    assert out.startswith("ingest: ") and "\x1b" not in out
    piped = cli_subprocess(*args[3:], "--rescore-all")
    assert piped.returncode == 0 and "scoring" not in piped.stderr
    events = json.loads(cli_subprocess("status", "--json", "--db", str(tmp_path / "l.sqlite")).stdout)["events"]
    code, out, drawn = _on_terminal([sys.executable, "-m", "agentledger", "rebuild", "--db", str(tmp_path / "l.sqlite")])
    assert code == 0 and f"{events:,}/{events:,}" in drawn and "/?" not in drawn, drawn[-300:]
    export = tmp_path / "events.jsonl"
    assert cli_subprocess("export", "-o", str(export), "--db", str(tmp_path / "l.sqlite")).returncode == 0
    code, out, drawn = _on_terminal([sys.executable, "-m", "agentledger", "import", str(export),
                                     "--db", str(tmp_path / "copy.sqlite")])
    assert code == 0 and f"{events:,}/{events:,}" in drawn and f"import: {events} events read, {events} new" in out


def test_a_large_catch_up_on_a_terminal_shows_the_bytes_read(tmp_path: Path) -> None:
    """A results file copied in whole (here 12 MiB) is read with a bar in MiB, to the end."""
    run = tmp_path / "vally" / "run-a"
    run.mkdir(parents=True)
    with (run / "results.jsonl").open("wb") as fh:
        i = 0
        while fh.tell() < 12 << 20:
            fh.write(synth.vally_trial_line(i, pad=20_000))
            i += 1
    size = (run / "results.jsonl").stat().st_size / 2**20
    args = [sys.executable, "-m", "agentledger", "ingest", "--vally", str(tmp_path / "vally"),
            "--db", str(tmp_path / "l.sqlite")]
    code, out, drawn = _on_terminal(args)
    assert code == 0 and "reading results.jsonl" in drawn and f"{size:,.1f}/{size:,.1f} MiB" in drawn, drawn[-400:]
    with sqlite3.connect(tmp_path / "l.sqlite") as c:
        assert c.execute("SELECT count(*) FROM trials").fetchone()[0] == i  # every trial, once
    piped = cli_subprocess(*args[3:], "--db", str(tmp_path / "again.sqlite"))
    assert piped.returncode == 0 and "reading" not in piped.stderr  # nothing drawn off a terminal
