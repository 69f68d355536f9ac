"""Shared test helpers: the ../shared fixtures, real git repositories, the CLI."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import threading
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AGENTLEDGER_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
TESTDATA = FIXTURES / "dot-agents" / "internal" / "scoring" / "testdata"
REAL_LOG = FIXTURES / "dot-agents" / ".agents" / "active" / "iteration-log"
REFERENCE = FIXTURES / "reference-scores"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


def need_fixtures() -> Path:
    """The shared fixtures; in CI a missing fixture is a failure, never a skip."""
    if not FIXTURES.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared fixtures missing at {FIXTURES} (CI=true)")
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture
def fixtures() -> Path:
    return need_fixtures()


class Repo:
    """A real git repository in a temp dir, with a `master` trunk by default."""

    def __init__(self, path: Path, branch: str = "master"):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", branch)

    def git(self, *args: str, input: str | None = None) -> str:
        env = {**os.environ, **GIT_ENV}
        proc = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True,
                              env=env, input=input, check=True)
        return proc.stdout.strip()

    def commit(self, message: str, files: dict[str, str] | None = None, *, date: str | None = None) -> str:
        for rel, text in (files or {}).items():
            p = self.path / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            self.git("add", rel)
        extra = {}
        if date:
            extra = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        env = {**os.environ, **GIT_ENV, **extra}
        subprocess.run(["git", "-C", str(self.path), "commit", "-q", "--allow-empty", "-m", message],
                       check=True, env=env, capture_output=True)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def make_repo(tmp_path: Path):
    def make(name: str = "repo", branch: str = "master") -> Repo:
        return Repo(tmp_path / name, branch)

    return make


@pytest.fixture
def empty_repo(make_repo) -> Repo:
    return make_repo("empty-repo")


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit status, stdout, stderr)."""
    from agentledger.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def cli_subprocess(*args: str, cwd: Path | None = None, env: dict | None = None,
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentledger", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)


def empty_ledger(path: Path) -> Path:
    """A new, migrated ledger with nothing in it (read commands never create one)."""
    from agentledger.store.db import connect

    connect(path).close()
    return path


def copy_log(src: Path, dst: Path) -> Path:
    """A writable copy of an iteration log as an agent leaves it: without the
    ``*.score.yaml`` sidecars a scorer wrote into the fixture (the real log ships
    the Go scorer's), so a test sees the files this product writes, not those."""
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    for p in dst.glob("*.score.yaml"):
        p.unlink()
    return dst


def single_file_log(tmp_path: Path, fixture: str, n: int) -> Path:
    d = tmp_path / f"log-{fixture}"
    d.mkdir()
    shutil.copy(TESTDATA / f"{fixture}.yaml", d / f"iter-{n}.yaml")
    return d


# -- no process of the project outlives the test run -----------------------------------
RUN_TAG = "AGENTLEDGER_TEST_RUN"


def tagged_processes(tag: str, *, exclude_own: bool = False) -> list[tuple[int, str]]:
    """Processes whose environment carries ``RUN_TAG=tag`` (every process a test starts
    inherits it, and so do their forkservers and workers): (pid, command line).
    ``exclude_own``: leave out this process and the worker pool it runs itself (its
    forkserver, resource tracker and their children die with it)."""
    needle = f"{RUN_TAG}={tag}".encode()
    me = os.getpid()
    own = {me}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if needle in env:
            found.append((pid, ppid, cmd))
    if exclude_own:
        changed = True
        while changed:  # own: this process, and the multiprocessing helpers under it
            changed = False
            for pid, ppid, cmd in found:
                if pid not in own and ppid in own and "multiprocessing" in cmd:
                    own.add(pid)
                    changed = True
    return [(pid, cmd) for pid, ppid, cmd in found if pid not in own]


@contextlib.contextmanager
def small_file_system(directory: Path, size: str = "8m"):
    """A tmpfs of ``size`` mounted on ``directory`` (made) for the block; skips without root."""
    directory.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)


def fill(directory: Path) -> Path:
    """Fill ``directory``'s file system to its last block with one ballast file (returned)."""
    ballast = directory / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return ballast


def query(db: Path, sql: str, *args) -> list[tuple]:
    """Rows of one statement on the ledger at ``db`` (a connection of its own, closed)."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def wait_until(condition, timeout: float, interval: float = 0.05):
    """Poll ``condition`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(interval)


def leftover_temp_dirs() -> set[str]:
    """Our temp directories in $TMPDIR whose owner is gone: a killed run's. Those of
    live processes (this run's own pool, another test run beside this one) are not
    leftovers; names without a pid (old versions' ``agentledger-ui-*``) always are."""
    import tempfile

    from agentledger.process import lifetime

    out = set()
    for p in Path(tempfile.gettempdir()).iterdir():
        if not p.name.startswith(("agentledger-pool-", "agentledger-ui-", "agentledger-eacces-", "agentledger-pg-")):
            continue
        pid = p.name.removeprefix("agentledger-pool-").removeprefix("agentledger-pg-").partition("-")[0]
        try:
            alive = pid.isdigit() and lifetime.owner_alive(int(pid), p.stat().st_mtime)
        except OSError:
            continue
        if not alive:
            out.add(p.name)
    return out


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_suite():
    """Fails the run if any process a test started (tagged through the environment)
    is still alive once the suite is done, or left a temp directory behind."""
    import uuid

    tag = uuid.uuid4().hex
    os.environ[RUN_TAG] = tag
    before = leftover_temp_dirs()
    yield
    from agentledger.process import parallel

    parallel.shutdown()
    left = wait_until(lambda: not tagged_processes(tag, exclude_own=True), 10)
    if not left:
        survivors = "\n".join(f"  {pid}: {cmd[:200]}" for pid, cmd in tagged_processes(tag, exclude_own=True))
        pytest.fail(f"processes started by the tests outlived them:\n{survivors}")
    new = leftover_temp_dirs() - before
    if new:
        pytest.fail(f"the tests left temp directories behind: {sorted(new)}")


@pytest.fixture(scope="session")
def pg():
    """A throwaway PostgreSQL 15 cluster for the whole run (tests/pgcluster.py); each
    test makes its own database in it. Missing server binaries or psycopg: a skip,
    a failure under CI=true (`make test` installs both)."""
    import importlib.util

    from . import pgcluster

    missing = [what for what, ok in (("PostgreSQL 15 server binaries in " + str(pgcluster.BIN), pgcluster.available()),
                                     ("psycopg (the [central] extra)", importlib.util.find_spec("psycopg") is not None))
               if not ok]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{' and '.join(missing)} missing (CI=true; `make test` installs them)")
        pytest.skip(f"{' and '.join(missing)} missing (`make test` installs them)")
    cluster = pgcluster.Cluster()
    yield cluster
    cluster.close()


def threads_named(prefix: str) -> list[threading.Thread]:
    """This process's live threads whose name starts with ``prefix`` (the product names
    each thread it starts: "agentledger-…")."""
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]
