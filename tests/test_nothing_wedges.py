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

from .conftest import run_cli


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
