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

from .conftest import fill, run_cli


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


def test_a_file_made_readable_again_is_read(tmp_path: Path) -> None:
    """As an unprivileged user (root reads everything): chmod 000, ingest, chmod 644, ingest."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    import pwd

    from .test_daemon import _reachable_install

    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="agentledger-eacces-"))
    try:
        base.chmod(0o755)
        gen = synth.generate(base / "gen", 8, seed=4)
        python, env = _reachable_install(base / "site")
        (base / "home").mkdir()
        for p in [base, *base.rglob("*")]:
            os.chown(p, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
        as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
        env = {**os.environ, **env, "HOME": str(base / "home")}
        db = base / "l.sqlite"
        args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]

        def ingest(*extra: str) -> subprocess.CompletedProcess:
            return subprocess.run([*as_nobody, python, "-m", "agentledger", *extra, *args], env=env,
                                  capture_output=True, text=True, timeout=300)

        probe = subprocess.run([*as_nobody, python, "-c", "import agentledger.cli"], env=env, capture_output=True,
                               text=True)
        if probe.returncode != 0:
            pytest.skip(f"no Python interpreter the unprivileged user can run: {probe.stderr.strip()[-200:]}")
        (gen.log / "iter-6.yaml").chmod(0o000)
        first = ingest("ingest")
        assert first.returncode == 0, first.stderr
        assert "Permission denied" in open_problems(db, "iter-6.yaml")[0][0]
        assert not (gen.log / "iter-6.score.yaml").exists()
        (gen.log / "iter-6.yaml").chmod(0o644)  # no other change: the stat key (size, mtime) is the same
        again = ingest("ingest")
        assert again.returncode == 0, again.stderr
        assert open_problems(db, "iter-6.yaml") == [] and (gen.log / "iter-6.score.yaml").is_file()
    finally:
        shutil.rmtree(base, ignore_errors=True)


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


def test_a_service_user_scores_a_repository_another_user_owns(tmp_path: Path) -> None:
    """The shared-server deployment: agentledger runs as its own user and scores a
    repository owned by someone else (here root), which git refuses as "dubious
    ownership" unless the configured path is trusted."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    import pwd

    from .test_daemon import _reachable_install

    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="agentledger-owner-"))
    try:
        base.chmod(0o755)
        gen = synth.generate(base / "gen", 10, seed=8)  # owned by root, as a colleague's checkout is theirs
        for p in [base / "gen", *(base / "gen").rglob("*")]:
            p.chmod(p.stat().st_mode | 0o055)  # readable by others, as a shared server's home usually is
        os.chown(gen.log, nobody.pw_uid, nobody.pw_gid)  # the drop-in's ReadWritePaths=: sidecars go here
        state = base / "state"
        state.mkdir()
        os.chown(state, nobody.pw_uid, nobody.pw_gid)
        python, env = _reachable_install(base / "site")
        as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
        env = {**os.environ, **env, "HOME": str(state)}
        probe = subprocess.run([*as_nobody, python, "-c", "import agentledger.cli"], env=env, capture_output=True,
                               text=True)
        if probe.returncode != 0:
            pytest.skip(f"no Python interpreter the unprivileged user can run: {probe.stderr.strip()[-200:]}")
        dubious = subprocess.run([*as_nobody, "git", "-C", str(gen.repo), "log", "-1"], capture_output=True,
                                 text=True, env={**env, "GIT_CONFIG_GLOBAL": "/dev/null"})
        assert dubious.returncode != 0 and "dubious ownership" in dubious.stderr  # what git does without trust
        proc = subprocess.run([*as_nobody, python, "-m", "agentledger", "ingest", "--json", "--iteration-log",
                               str(gen.log), "--repo", str(gen.repo), "--db", str(state / "l.sqlite")],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        import json

        assert json.loads(proc.stdout)["scored"] == 10
        with sqlite3.connect(state / "l.sqlite") as c:
            landed = c.execute("SELECT count(*) FROM signal_contributions WHERE signal = 'landed' AND present"
                               ).fetchone()[0]
        assert landed > 0  # git answered: the landed signal is there
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_full_disk_under_the_ledger_is_one_line(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
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
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


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
