"""Nothing wedges and nothing lies: a file made readable again is read, a file has
one open problem, a sidecar that cannot be written is a problem record while the rest
completes, and every failure is one line."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

from agentledger.example import synth

from .conftest import fill, run_cli, small_file_system


class Unprivileged:
    """Commands run as ``nobody`` (root reads and writes everything), from a copy of the
    package that user can read, in a temp directory removed afterwards."""

    def __init__(self) -> None:
        import pwd

        from .test_daemon import _reachable_install

        user = pwd.getpwnam("nobody")
        self.uid, self.gid = user.pw_uid, user.pw_gid
        self.base = Path(tempfile.mkdtemp(prefix="agentledger-eacces-"))  # the leftover check knows the name
        self.base.chmod(0o755)
        self.python, env = _reachable_install(self.base / "site")
        self.env = {**os.environ, **env, "HOME": str(self.base)}
        self.prefix = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]

    def own(self, *paths: Path) -> None:
        for p in paths:
            os.chown(p, self.uid, self.gid, follow_symlinks=False)

    def run(self, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, *argv], env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=300)

    def agentledger(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(self.python, "-m", "agentledger", *args)


@pytest.fixture
def nobody():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    user = Unprivileged()
    try:
        probe = user.run(user.python, "-c", "import agentledger.cli")
        if probe.returncode != 0:
            pytest.skip(f"no Python interpreter the unprivileged user can run: {probe.stderr.strip()[-200:]}")
        yield user
    finally:
        shutil.rmtree(user.base, ignore_errors=True)


def open_problems(db: Path, path: str) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT reason FROM quarantine WHERE path = ? AND resolved_seq IS NULL", (path,)).fetchall()


def test_a_file_has_one_open_problem_its_newest(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 10, seed=3)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    assert run_cli("ingest", *args)[0] == 0
    good = (gen.log / "iter-5.yaml").read_bytes()
    for half in (good[: len(good) // 2] + b"\n  - [", b"iteration: 5\ndate: {\n", b"\xff\xfe half"):
        (gen.log / "iter-5.yaml").write_bytes(half)
        assert run_cli("ingest", *args)[0] == 0
        assert len(open_problems(db, "iter-5.yaml")) == 1
    (gen.log / "iter-5.yaml").write_bytes(good)
    assert run_cli("ingest", *args)[0] == 0
    assert open_problems(db, "iter-5.yaml") == []


def test_a_file_made_readable_again_is_read(nobody: Unprivileged) -> None:
    """As an unprivileged user (root reads everything): chmod 000, ingest, chmod 644, ingest."""
    gen = synth.generate(nobody.base / "gen", 8, seed=4)
    nobody.own(*[nobody.base / "gen", *(nobody.base / "gen").rglob("*")])
    db = nobody.base / "gen" / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    (gen.log / "iter-6.yaml").chmod(0o000)
    first = nobody.agentledger("ingest", *args)
    assert first.returncode == 0, first.stderr
    assert "Permission denied" in open_problems(db, "iter-6.yaml")[0][0]
    assert not (gen.log / "iter-6.score.yaml").exists()
    (gen.log / "iter-6.yaml").chmod(0o644)  # no other change: the stat key (size, mtime) is the same
    again = nobody.agentledger("ingest", *args)
    assert again.returncode == 0, again.stderr
    assert open_problems(db, "iter-6.yaml") == [] and (gen.log / "iter-6.score.yaml").is_file()


def test_a_sidecar_that_cannot_be_written_is_a_problem_record_and_the_rest_completes(tmp_path: Path) -> None:
    import json

    gen = synth.generate(tmp_path / "gen", 12, seed=6)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    target = gen.log / "iter-8.score.yaml"
    os.symlink(tmp_path / "elsewhere.yaml", target)
    code, _, err = run_cli("ingest", *args)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 1 and len(lines) == 1 and str(target) in lines[0] and "quarantine" in lines[0], err
    assert len(list(gen.log.glob("iter-*.score.yaml"))) == 12 and target.is_symlink()
    assert not (tmp_path / "elsewhere.yaml").exists()
    # a backfill completes, says the problem once more as a count, and status says it is done
    code, _, err = run_cli("backfill", "--rubric", "3.0.0", *args)
    assert code == 1 and "1 sidecar(s) still cannot be written" in err
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM events WHERE type = 'backfill.completed'").fetchone()[0] == 1
    code, out, _ = run_cli("status", *args)
    assert "backfill" not in out.lower() or "in progress" not in out.lower()
    assert "not written   1 sidecar(s)" in out
    code, out, _ = run_cli("quarantine", "--json", *args)
    problems = [q for q in json.loads(out) if q["kind"] == "sidecar"]
    assert [q["path"] for q in problems] == [str(target)] and "not a regular file" in problems[0]["reason"]
    # the hook says what happened to its sidecar
    code, out, err = run_cli("score", "8", *args)
    assert code == 1 and "(NOT WRITTEN: see below)" in out and "still cannot be written" in err
    code, out, err = run_cli("score", "9", "-q", *args)
    assert code == 0 and out == ""  # -q: errors only
    # rebuild does everything else
    for p in gen.log.glob("iter-*.score.yaml"):
        if not p.is_symlink():
            p.unlink()
    code, _, err = run_cli("rebuild", *args)
    assert code == 1 and len(list(gen.log.glob("iter-*.score.yaml"))) == 12
    # fixed: written, and the problem is gone
    target.unlink()
    assert run_cli("ingest", *args)[0] == 0 and target.is_file() and not target.is_symlink()
    code, out, _ = run_cli("quarantine", "--json", *args)
    assert not [q for q in json.loads(out) if q["kind"] == "sidecar"]


def test_a_service_user_scores_a_repository_another_user_owns(nobody: Unprivileged) -> None:
    """The shared-server deployment: agentledger runs as its own user and scores a
    repository owned by someone else (here root), which git refuses as "dubious
    ownership" unless the configured path is trusted."""
    import json

    gen = synth.generate(nobody.base / "gen", 10, seed=8)  # owned by root, as a colleague's checkout is theirs
    for p in [nobody.base / "gen", *(nobody.base / "gen").rglob("*")]:
        p.chmod(p.stat().st_mode | 0o055)  # readable by others, as a shared server's home usually is
    state = nobody.base / "state"
    state.mkdir()
    nobody.own(gen.log, state)  # the log: the unit's ReadWritePaths= (sidecars go there); the ledger's directory
    dubious = nobody.run("git", "-C", str(gen.repo), "log", "-1", env={"GIT_CONFIG_GLOBAL": "/dev/null"})
    assert dubious.returncode != 0 and "dubious ownership" in dubious.stderr  # what git does without trust
    proc = nobody.agentledger("ingest", "--json", "--iteration-log", str(gen.log), "--repo", str(gen.repo),
                              "--db", str(state / "l.sqlite"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["scored"] == 10
    with sqlite3.connect(state / "l.sqlite") as c:
        landed = c.execute("SELECT count(*) FROM signal_contributions WHERE signal = 'landed' AND present"
                           ).fetchone()[0]
    assert landed > 0  # git answered: the landed signal is there


def test_a_full_disk_under_the_ledger_is_one_line(tmp_path: Path) -> None:
    with small_file_system(tmp_path / "small", "16m") as small:
        gen = synth.generate(tmp_path / "gen", 10, seed=2)
        args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(small / "l.sqlite")]
        assert run_cli("ingest", *args)[0] == 0
        ballast = fill(small)
        for n in range(11, 60):
            (gen.log / f"iter-{n}.yaml").write_text((gen.log / "iter-3.yaml").read_text().replace(
                "iteration: 3", f"iteration: {n}") + f"padding_note: \"{'x' * 30000}\"\n")
        for cmd in (("ingest",), ("score", "40")):
            proc = subprocess.run([sys_executable(), "-m", "agentledger", *cmd, *args], capture_output=True,
                                  text=True, timeout=300)
            lines = [x for x in proc.stderr.splitlines() if x.strip()]
            assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
            assert len(lines) == 1 and ("full" in lines[0] or "disk I/O" in lines[0]), proc.stderr
        ballast.unlink()
        code, _, err = run_cli("ingest", *args)
        assert code == 0, err


def sys_executable() -> str:
    import sys

    return sys.executable


def test_ui_refuses_a_port_that_is_none_and_a_public_host_unless_told() -> None:
    from .conftest import cli_subprocess

    for args, needle in ((("--port", "99999"), "not a port"), (("--host", "0.0.0.0"), "--public"),
                         (("--host", "::"), "--public")):
        proc = cli_subprocess("ui", *args)
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
    proc = cli_subprocess("status", "--rubric", "9.9")
    assert proc.returncode == 2 and "--rubric goes with a command that scores" in proc.stderr
