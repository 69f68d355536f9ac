"""`agentledger run` as a real subprocess, talking sd_notify over a real datagram socket."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import Repo, fill, query, small_file_system

RECORD = "schema_version: 1\niteration: {n}\nscope_note: on-target\ntests_total_pass: true\nretries: {r}\n"


class Notify:
    """A unix datagram socket standing in for systemd's notification socket,
    drained continuously on a thread as systemd does."""

    def __init__(self, path: Path):
        import threading

        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except (TimeoutError, OSError):
                pass

    def wait_for(self, needle: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in list(self.messages):
                if needle in m:
                    return m
            time.sleep(0.02)
        raise AssertionError(f"no {needle!r} within {timeout}s; got {self.messages[-10:]}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def wait_until(pred, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def log_of(tmp_path: Path, n: int) -> Path:
    """An iteration-log directory with iterations 1..n closed."""
    log = tmp_path / "log"
    log.mkdir()
    for k in range(1, n + 1):
        (log / f"iter-{k}.yaml").write_text(RECORD.format(n=k, r=k % 3))
    return log


def configured(tmp_path: Path, make_repo, n: int, extra: str = "") -> tuple[Path, Path]:
    """A log of ``n`` closed iterations and a config file for it (``extra`` TOML after
    [store]): (log, config)."""
    repo = make_repo()
    log = log_of(tmp_path, n)
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "l.sqlite"}"\n{extra}'
                   f'[[iteration_logs]]\npath = "{log}"\nrepo = "{repo.path}"\n')
    return log, cfg


@contextlib.contextmanager
def running(tmp_path: Path, cfg: Path):
    """`agentledger run --config CFG` with a notify socket; stopped with SIGTERM (exit 0
    expected) when the block ends, killed if it fails first."""
    notify = Notify(tmp_path / "n.sock")
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--config", str(cfg)],
                            stdout=(tmp_path / "daemon.log").open("w"), stderr=subprocess.STDOUT,
                            env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
    try:
        yield proc, notify
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()


@pytest.fixture
def daemon(tmp_path: Path, make_repo):
    repo = make_repo()
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text(RECORD.format(n=1, r=0))
    notify = Notify(tmp_path / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentledger", "run", "--iteration-log", str(log), "--repo", str(repo.path),
         "--db", str(tmp_path / "l.sqlite")],
        stdout=(tmp_path / "daemon.log").open("w"), stderr=subprocess.STDOUT, env=env, text=True)
    yield proc, notify, log
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    notify.close()


def test_notify_protocol_watch_and_graceful_stop(daemon) -> None:
    proc, notify, log = daemon
    ready = notify.wait_for("READY=1")
    assert "STATUS=1 iterations" in ready  # the initial scan is done before READY
    assert (log / "iter-1.score.yaml").is_file()
    notify.wait_for("WATCHDOG=1")

    # a new iteration written in place, and one saved editor-style (temp file renamed over)
    (log / "iter-2.yaml").write_text(RECORD.format(n=2, r=1))
    tmp = log / ".iter-3.yaml.swp"
    tmp.write_text(RECORD.format(n=3, r=2))
    os.replace(tmp, log / "iter-3.yaml")
    assert wait_until(lambda: (log / "iter-2.score.yaml").is_file() and (log / "iter-3.score.yaml").is_file())
    assert "2 retries" in (log / "iter-3.score.yaml").read_text()

    # touch without a change: nothing is rewritten
    mtime = (log / "iter-2.score.yaml").stat().st_mtime_ns
    os.utime(log / "iter-2.yaml")
    time.sleep(0.6)
    assert (log / "iter-2.score.yaml").stat().st_mtime_ns == mtime
    # a real edit is picked up
    (log / "iter-2.yaml").write_text(RECORD.format(n=2, r=4))
    assert wait_until(lambda: "4 retries" in (log / "iter-2.score.yaml").read_text())

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    notify.wait_for("STOPPING=1")
    out = (log.parent / "daemon.log").read_text()
    lines = [json.loads(line[3:]) for line in out.splitlines() if line.startswith("<")]
    assert any(e["event"] == "ready" for e in lines) and any(e["event"] == "stopped" for e in lines)
    assert all(line["level"] in ("info", "warning", "error") for line in lines)


def test_bad_input_never_stops_the_daemon(daemon) -> None:
    proc, notify, log = daemon
    notify.wait_for("READY=1")
    (log / "iter-5.yaml").write_text("schema_version: 2\niteration: [unclosed\n")
    (log / "iter-6.yaml").write_bytes(b"\xff\xfe binary junk \x00\x01")
    (log / "iter-7.yaml").write_text("v: " + "[" * 50000 + "]" * 50000)
    (log / "iter-8.yaml").mkdir()
    (log / "iter-9.yaml").write_text(RECORD.format(n=9, r=0))
    assert wait_until(lambda: (log / "iter-9.score.yaml").is_file())
    assert proc.poll() is None
    out = subprocess.run([sys.executable, "-m", "agentledger", "quarantine", "--json", "--db",
                          str(log.parent / "l.sqlite")], capture_output=True, text=True)
    assert {q["path"] for q in json.loads(out.stdout)} >= {"iter-5.yaml", "iter-6.yaml", "iter-7.yaml", "iter-8.yaml"}
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0


def test_a_receiver_that_stops_reading_never_stalls_the_daemon(tmp_path: Path) -> None:
    """systemd not draining its socket must not block the main loop (sends never block)."""
    from agentledger.service.notify import Notifier

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "n.sock"))  # bound, never read
    n = Notifier(str(tmp_path / "n.sock"))
    t = time.monotonic()
    results = [n.send("WATCHDOG=1") for _ in range(2000)]
    assert time.monotonic() - t < 5 and results[0] and not all(results)
    assert Notifier("").send("READY=1") is False  # no socket: a no-op


def test_sighup_reloads_the_configuration_inside_reloading_and_ready(tmp_path: Path, make_repo) -> None:
    """A rubric bump in the config file: RELOADING=1, the backfill, then READY=1, so
    that `systemctl reload` returns with every sidecar already under the new rubric."""
    repo = make_repo()
    log = log_of(tmp_path, 5)
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "l.sqlite"}"\n[scoring]\nrubric = "2.1.0"\n'
                   f'[[iteration_logs]]\npath = "{log}"\nrepo = "{repo.path}"\n')
    with running(tmp_path, cfg) as (proc, notify):
        notify.wait_for("READY=1", timeout=30)
        assert "rubric_version: 2.1.0" in (log / "iter-5.score.yaml").read_text()
        seen = len(notify.messages)
        cfg.write_text(cfg.read_text().replace('rubric = "2.1.0"', 'rubric = "3.0.0"'))
        proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING=1", timeout=30)
        wait_until(lambda: any("READY=1" in m for m in notify.messages[seen:]), timeout=30)
        after = notify.messages[seen:]
        reloading = next(k for k, m in enumerate(after) if "RELOADING=1" in m)
        ready = next(k for k, m in enumerate(after) if "READY=1" in m)
        assert reloading < ready and "MONOTONIC_USEC=" in after[reloading]
        # by the time READY=1 was sent, every sidecar was already rewritten
        assert all("rubric_version: 3.0.0" in (log / f"iter-{n}.score.yaml").read_text() for n in range(1, 6))


def test_score_beside_the_running_daemon_never_hits_a_locked_database(daemon, tmp_path: Path) -> None:
    """The close-task hook and the service write the same ledger at the same time."""
    from concurrent.futures import ThreadPoolExecutor

    proc, notify, log = daemon
    notify.wait_for("READY=1")
    repo = next(p for p in tmp_path.iterdir() if p.name == "repo")
    common = ["--iteration-log", str(log), "--repo", str(repo), "--db", str(tmp_path / "l.sqlite"), "--json"]

    def close(n: int) -> subprocess.CompletedProcess:
        (log / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=n % 3))
        return subprocess.run([sys.executable, "-m", "agentledger", "score", str(n), *common],
                              capture_output=True, text=True, timeout=60)

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(close, range(10, 30)))
    for r in results:
        assert r.returncode == 0, r.stderr
        assert "locked" not in r.stderr
    # the daemon saw the same files: its sidecars and the hook's are the same bytes
    ledger_view = subprocess.run([sys.executable, "-m", "agentledger", "rebuild", *common],
                                 capture_output=True, text=True)
    assert ledger_view.returncode == 0 and json.loads(ledger_view.stdout)["sidecars_written"] == 0
    assert proc.poll() is None


@pytest.mark.slow
def test_bad_input_corpus_is_quarantined_while_running(daemon) -> None:
    proc, notify, log = daemon
    notify.wait_for("READY=1")
    items = ",".join(["{name: t, kind: k}"] * 1000)
    bombs = ",".join(["*v"] * 1000)
    corpus = {
        "iter-20.yaml": "schema_version: 2\niteration: 20\nverifiers: [\n",  # truncated YAML
        "iter-21.yaml": (f"schema_version: 2\niteration: 21\nk: &k [{items}]\n"
                         f"v: &v {{status: pass, tests_added_by_kind: *k}}\nverifiers: [{bombs}]\n"),  # alias bomb
        "iter-22.yaml": "schema_version: 99\niteration: 22\n",  # unknown schema_version
        "iter-23.yaml": "schema_version: 1\niteration: 23\nretries: .inf\n",  # inf where an int goes
        "iter-25.yaml": "schema_version: 2\niteration: 25\nagent:\n  session_id: ../../etc/x\n",
    }
    for name, text in corpus.items():
        (log / name).write_text(text)
    (log / "iter-24.yaml").write_bytes(b"schema_version: 1\niteration: 24\nsummary: \"\xc3\x28\"\n")  # bad UTF-8
    (log / "iter-26.yaml").write_bytes(b"x: " + b"y" * (100 << 20) + b"\n")  # a 100 MB single line
    os.symlink("iter-27.yaml", log / "iter-27.yaml")  # a symlink loop
    (log / "iter-28.yaml").mkdir()  # a directory named like a record
    (log / "iter-29.yaml").write_text("schema_version: 2\niteration: 29\nsession_tokens:\n  cache_hit_rate: .nan\n")
    (log / "iter-30.yaml").write_text(RECORD.format(n=30, r=0))
    assert wait_until(lambda: (log / "iter-30.score.yaml").is_file(), timeout=30)
    assert wait_until(lambda: (log / "iter-29.score.yaml").is_file(), timeout=10)  # NaN is a value, scored
    assert proc.poll() is None
    out = subprocess.run([sys.executable, "-m", "agentledger", "quarantine", "--json", "--db",
                          str(log.parent / "l.sqlite")], capture_output=True, text=True)
    reasons = {q["path"]: q["reason"] for q in json.loads(out.stdout)}
    expected = {f"iter-{n}.yaml" for n in (20, 21, 22, 23, 24, 25, 26, 27, 28)}
    assert expected <= set(reasons), sorted(expected - set(reasons))
    assert "expands too many aliases" in reasons["iter-21.yaml"]
    assert "max_file_bytes" in reasons["iter-26.yaml"]
    assert "refused" in reasons["iter-25.yaml"] and (log / "iter-25.score.yaml").is_file()
    assert not (log.parent.parent / "etc").exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


@pytest.mark.slow
def test_a_burst_of_a_thousand_files_and_a_source_that_appears_later(tmp_path: Path, make_repo) -> None:
    repo = make_repo()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "l.sqlite"}"\n[daemon]\nreconcile_seconds = 2\n'
                   f'[[iteration_logs]]\npath = "{a}"\nrepo = "{repo.path}"\n'
                   f'[[iteration_logs]]\npath = "{b}"\nrepo = "{repo.path}"\n')
    with running(tmp_path, cfg) as (proc, notify):
        notify.wait_for("READY=1")  # one source missing does not stop the other
        for n in range(1, 1001):
            (a / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=n % 4))
        assert wait_until(lambda: len(list(a.glob("iter-*.score.yaml"))) == 1000, timeout=120)
        b.mkdir()
        (b / "iter-1.yaml").write_text(RECORD.format(n=1, r=2))
        assert wait_until(lambda: (b / "iter-1.score.yaml").is_file(), timeout=30)  # the reconcile found it
        assert proc.poll() is None
        assert "does not exist" in (tmp_path / "daemon.log").read_text()  # and it was said


@pytest.mark.slow
def test_full_disk_under_the_store_is_survived_and_recovered(tmp_path: Path, make_repo) -> None:
    """The ledger's file system fills up: the daemon logs, backs off, stays up, and catches up
    once there is room again; the database stays intact. The file system holds the whole
    ledger twice over once the ballast goes (its 39 records of 40 KB take ~8 MB with a WAL
    that grew while checkpoints could not run): at 8 MB, whether the last transaction fitted
    hung on when the space ran out."""
    with small_file_system(tmp_path / "small", "24m") as small:
        repo = make_repo()
        log = tmp_path / "log"
        log.mkdir()
        (log / "iter-1.yaml").write_text(RECORD.format(n=1, r=0))
        db = small / "l.sqlite"
        notify = Notify(tmp_path / "n.sock")
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentledger", "run", "--iteration-log", str(log), "--repo", str(repo.path),
             "--db", str(db)], stdout=(tmp_path / "daemon.log").open("w"), stderr=subprocess.STDOUT,
            env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
        try:
            notify.wait_for("READY=1")
            ballast = fill(small)
            for n in range(2, 40):  # records big enough to outgrow the WAL's pages (kept short by checkpoints)
                (log / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=n) + f"summary: \"{'x' * 40000}\"\n")
            assert wait_until(lambda: "step failed; will retry" in (tmp_path / "daemon.log").read_text(), timeout=20)
            assert proc.poll() is None
            ballast.unlink()  # space comes back
            assert wait_until(lambda: len(list(log.glob("iter-*.score.yaml"))) == 39, timeout=60)
            # logged when the retried step returns, a moment after its last sidecar lands
            assert wait_until(lambda: "recovered" in (tmp_path / "daemon.log").read_text(), timeout=10)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:  # a failure above leaves no service behind (nor its answering process)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
            notify.close()
        import sqlite3

        with sqlite3.connect(db) as c:
            assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert c.execute("SELECT count(*) FROM iterations").fetchone()[0] == 39


@pytest.mark.slow
def test_a_read_only_store_is_waited_for_and_a_failing_step_retried(tmp_path: Path, make_repo) -> None:
    """The store's directory is read-only when the service starts (a read-only bind
    mount, as a unit without ReadWritePaths= or a file system mounted ro at boot
    gives): it logs and waits with backoff, then opens, scans and scores once writable."""
    state = tmp_path / "state"
    state.mkdir()
    if subprocess.run(["mount", "--bind", str(state), str(state)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(state)], check=True)
        repo = make_repo()
        log = tmp_path / "log"
        log.mkdir()
        for n in range(1, 6):
            (log / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=n))
        db = state / "l.sqlite"
        notify = Notify(tmp_path / "n.sock")
        daemon_log = tmp_path / "daemon.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentledger", "run", "--iteration-log", str(log), "--repo", str(repo.path),
             "--db", str(db)], stdout=daemon_log.open("w"), stderr=subprocess.STDOUT,
            env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
        assert wait_until(lambda: daemon_log.read_text().count("cannot open the ledger; will retry") >= 2,
                          timeout=20)
        assert proc.poll() is None and notify.wait_for("STATUS=waiting for the store")
        assert not any("READY=1" in m for m in notify.messages) and not list(log.glob("*.score.yaml"))
        subprocess.run(["mount", "-o", "remount,rw,bind", str(state)], check=True)
        notify.wait_for("READY=1", timeout=30)
        assert wait_until(lambda: len(list(log.glob("iter-*.score.yaml"))) == 5, timeout=30)
        assert "recovered" in daemon_log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        notify.close()
        import sqlite3

        with sqlite3.connect(db) as c:
            assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def _reachable_install(site: Path) -> tuple[str, dict[str, str]]:
    """The package and what it imports, copied where an unprivileged user can read them
    (the checkout and its venv may lie in a 0700 directory), and the base interpreter
    (the venv's ``bin/python`` lies there too). Returns (interpreter, environment)."""
    import shutil
    import sysconfig

    import agentledger
    from agentledger.paths import schema_dir

    skip = shutil.ignore_patterns("pip", "pip-*", "setuptools", "setuptools-*", "_pytest", "pytest", "pytest-*",
                                  "hypothesis", "hypothesis-*", "datasette", "datasette-*", "__editable__*",
                                  "*.pth", "agentledger*", "__pycache__")
    shutil.copytree(sysconfig.get_paths()["purelib"], site, ignore=skip)
    shutil.copytree(Path(agentledger.__file__).parent, site / "agentledger", ignore=skip)
    shutil.copytree(schema_dir(), site / "agentledger" / "schema")
    python = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(python), {"PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}


def test_an_unreadable_source_directory_is_retried_and_others_are_unaffected() -> None:
    """Run as an unprivileged user (root reads everything), one of two logs mode 000."""
    if os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists():
        pytest.skip("needs root and setpriv to run the daemon as an unprivileged user")
    import pwd
    import shutil
    import tempfile

    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="agentledger-eacces-"))
    try:
        base.chmod(0o755)
        repo = Repo(base / "repo")
        a, b = base / "a", base / "b"
        for d in (a, b):
            d.mkdir()
            (d / "iter-1.yaml").write_text(RECORD.format(n=1, r=0))
        cfg = base / "agentledger.toml"
        cfg.write_text(f'[store]\npath = "{base / "state" / "l.sqlite"}"\n[daemon]\nreconcile_seconds = 2\n'
                       f'[[iteration_logs]]\npath = "{a}"\nrepo = "{repo.path}"\n'
                       f'[[iteration_logs]]\npath = "{b}"\nrepo = "{repo.path}"\n')
        (base / "home").mkdir()
        python, env = _reachable_install(base / "site")
        for p in [base, *base.rglob("*")]:
            os.chown(p, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
        as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
        env = {**os.environ, **env, "HOME": str(base / "home")}
        probe = subprocess.run([*as_nobody, python, "-c", "import agentledger.cli"], env=env, capture_output=True,
                               text=True)
        if probe.returncode != 0:
            pytest.skip(f"no Python interpreter the unprivileged user can run: {probe.stderr.strip()[-200:]}")
        daemon_log = base / "daemon.log"
        proc = subprocess.Popen(
            [*as_nobody, python, "-m", "agentledger", "run", "--config", str(cfg)],
            stdout=daemon_log.open("w"), stderr=subprocess.STDOUT, env=env)
        try:
            assert wait_until(lambda: (b / "iter-1.score.yaml").is_file(), timeout=30)
            b.chmod(0o000)  # b becomes unreadable while the service runs
            assert wait_until(lambda: "Permission denied" in daemon_log.read_text(), timeout=15), \
                daemon_log.read_text()
            (a / "iter-2.yaml").write_text(RECORD.format(n=2, r=1))
            assert wait_until(lambda: (a / "iter-2.score.yaml").is_file(), timeout=10)  # a is unaffected
            assert proc.poll() is None
            b.chmod(0o755)  # access comes back: the next reconcile picks up what was written meanwhile
            (b / "iter-2.yaml").write_text(RECORD.format(n=2, r=3))
            assert wait_until(lambda: (b / "iter-2.score.yaml").is_file(), timeout=30)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        import sqlite3

        with sqlite3.connect(base / "state" / "l.sqlite") as c:  # an unlistable directory removed nothing
            assert c.execute("SELECT count(*) FROM events WHERE type = 'file.removed'").fetchone()[0] == 0
            assert c.execute("SELECT count(*) FROM iterations").fetchone()[0] == 4, daemon_log.read_text()
            assert c.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0, daemon_log.read_text()
    finally:
        b.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_the_daemon_follows_a_rubric_the_hook_activated_and_never_reverts_it(tmp_path: Path, make_repo) -> None:
    """`run` with rubric 3.0.0 configured; the hook runs `score 1 --rubric 2.1.0`: the
    next iteration the daemon scores is scored under 2.1.0, and its reconcile (a
    SIGHUP reload here) keeps 2.1.0, since the configured value never changed."""
    import sqlite3

    log, cfg = configured(tmp_path, make_repo, 3, '[scoring]\nrubric = "3.0.0"\n')
    db = tmp_path / "l.sqlite"
    sidecar = lambda k: log / f"iter-{k}.score.yaml"  # noqa: E731
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        assert wait_until(lambda: sidecar(3).exists() and b"3.0.0" in sidecar(3).read_bytes(), 60)
        hook = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(cfg), "score", "1",
                               "--rubric", "2.1.0"], capture_output=True, text=True, timeout=120)
        assert hook.returncode == 0, hook.stderr
        (log / "iter-4.yaml").write_text(RECORD.format(n=4, r=1))
        assert wait_until(lambda: sidecar(4).exists(), 60)
        assert b"rubric_version: 2.1.0" in sidecar(4).read_bytes()
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: sum("READY=1" in m for m in list(notify.messages)) >= 2, 60)
        with sqlite3.connect(db) as c:
            assert c.execute("SELECT value FROM ledger_state WHERE key = 'active_rubric'").fetchone()[0] == "2.1.0"
            assert {r[0] for r in c.execute("SELECT rubric_version FROM latest_scores")} == {"2.1.0"}
        assert all(b"rubric_version: 2.1.0" in p.read_bytes() for p in log.glob("iter-*.score.yaml"))
    assert "rubric 2.1.0 -> 3.0.0" not in (tmp_path / "daemon.log").read_text()


def test_a_sidecar_that_cannot_be_written_is_said_once_and_holds_nothing_up(tmp_path: Path, make_repo) -> None:
    log, cfg = configured(tmp_path, make_repo, 3)
    os.symlink(tmp_path / "nowhere", log / "iter-2.score.yaml")
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        for k in range(2):  # two reloads: two more full scans that meet the same problem
            proc.send_signal(signal.SIGHUP)
            assert wait_until(lambda k=k: sum("READY=1" in m for m in list(notify.messages)) >= k + 2, 60)
        (log / "iter-4.yaml").write_text(RECORD.format(n=4, r=1))
        assert wait_until(lambda: (log / "iter-4.score.yaml").is_file(), 60)
    text = (tmp_path / "daemon.log").read_text()
    assert text.count("sidecar not written") == 1, text
    assert (log / "iter-1.score.yaml").is_file() and (log / "iter-3.score.yaml").is_file()
    assert "Traceback" not in text


def test_one_daemon_per_ledger_and_a_killed_one_leaves_no_lock(tmp_path: Path, make_repo) -> None:
    log, cfg = configured(tmp_path, make_repo, 2)
    notify = Notify(tmp_path / "first.sock")
    first = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--config", str(cfg)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
    try:
        assert notify.wait_for("READY=1", 60)
        second = subprocess.run([sys.executable, "-m", "agentledger", "run", "--config", str(cfg),
                                 "--log-format", "console"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        said = [x for x in (second.stdout + second.stderr).splitlines() if "another agentledger run" in x]
        assert len(said) == 1 and f"pid {first.pid}" in said[0] and "Traceback" not in second.stdout + second.stderr
        assert first.poll() is None
    finally:
        first.kill()  # SIGKILL: the lock goes with the process
        first.wait()
        notify.close()
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)


def test_a_reload_onto_another_ledger_moves_the_run_lock(tmp_path: Path, make_repo) -> None:
    """A reload whose configuration names another ledger takes that ledger's run lock
    before it opens it, and lets go of the old one; onto a ledger another daemon holds,
    it is refused in one line and the running configuration goes on working."""
    import fcntl

    log, cfg = configured(tmp_path, make_repo, 2)
    first_store, free_store, held_store = tmp_path / "l.sqlite", tmp_path / "moved.sqlite", tmp_path / "held.sqlite"
    other_log = tmp_path / "other-log"
    other_log.mkdir()
    (other_log / "iter-1.yaml").write_text(RECORD.format(n=1, r=0))
    other_cfg = tmp_path / "other.toml"
    other_cfg.write_text(f'[store]\npath = "{held_store}"\n[[iteration_logs]]\npath = "{other_log}"\n'
                         f'repo = "{make_repo("other-repo").path}"\n')
    holder_notify = Notify(tmp_path / "holder.sock")
    holder = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--config", str(other_cfg)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "NOTIFY_SOCKET": str(holder_notify.path)})

    def locked(store: Path) -> bool:  # the run lock is the ledger file's own
        fd = os.open(store, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def reload(proc: subprocess.Popen, notify: Notify, store: Path) -> None:
        seen = len(notify.messages)
        cfg.write_text(cfg.read_text().replace(f'path = "{current[0]}"', f'path = "{store}"'))
        current[0] = store
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: any("READY=1" in m for m in notify.messages[seen:]), 60)

    current = [first_store]
    try:
        assert holder_notify.wait_for("READY=1", 60)
        with running(tmp_path, cfg) as (proc, notify):
            assert notify.wait_for("READY=1", 60)
            assert locked(first_store) and locked(held_store)
            reload(proc, notify, held_store)  # held by the other daemon: refused
            said = [x for x in (tmp_path / "daemon.log").read_text().splitlines() if "reload refused" in x]
            assert len(said) == 1 and f"pid {holder.pid}" in said[0] and "keeping the running" in said[0]
            (log / "iter-3.yaml").write_text(RECORD.format(n=3, r=0))  # still the first ledger's service
            assert wait_until(lambda: (log / "iter-3.score.yaml").is_file(), 60)
            with contextlib.closing(__import__("sqlite3").connect(held_store)) as c:
                assert c.execute("SELECT count(*) FROM iterations").fetchone()[0] == 1  # the holder's one alone
            reload(proc, notify, free_store)  # free: taken, and the first one let go
            assert wait_until(lambda: locked(free_store) and not locked(first_store), 10)
            second = subprocess.run([sys.executable, "-m", "agentledger", "run", "--config", str(cfg)],
                                    capture_output=True, text=True, timeout=60)
            assert second.returncode == 1 and f"pid {proc.pid}" in second.stdout + second.stderr
            (log / "iter-4.yaml").write_text(RECORD.format(n=4, r=0))
            assert wait_until(lambda: (log / "iter-4.score.yaml").is_file(), 60)
            with contextlib.closing(__import__("sqlite3").connect(free_store)) as c:
                assert c.execute("SELECT max(iteration) FROM iterations").fetchone()[0] == 4
        assert "Traceback" not in (tmp_path / "daemon.log").read_text()
    finally:
        holder.send_signal(signal.SIGTERM)
        try:
            holder.wait(30)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            holder_notify.close()


def test_a_reload_onto_the_running_ledger_by_another_name_keeps_it(tmp_path: Path, make_repo) -> None:
    """The same ledger spelled through a symlinked directory is the same ledger: the
    reload takes effect (it does not wait for its own run lock) and the lock stays held."""
    import fcntl

    log, cfg = configured(tmp_path, make_repo, 2)
    alias = tmp_path / "alias"
    alias.symlink_to(tmp_path, target_is_directory=True)
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        cfg.write_text(cfg.read_text().replace(f'path = "{tmp_path / "l.sqlite"}"', f'path = "{alias / "l.sqlite"}"'))
        seen = len(notify.messages)
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: any("READY=1" in m for m in notify.messages[seen:]), 60)
        text = (tmp_path / "daemon.log").read_text()
        assert "configuration reloaded" in text and "reload refused" not in text
        (log / "iter-3.yaml").write_text(RECORD.format(n=3, r=0))
        assert wait_until(lambda: (log / "iter-3.score.yaml").is_file(), 60)
        fd = os.open(tmp_path / "l.sqlite", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # still held: a second daemon would be refused
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def test_sigterm_during_a_long_first_scan_ends_it_at_a_batch_and_the_next_start_goes_on(
        tmp_path: Path, make_repo) -> None:
    """A first scan of thousands of iterations is one step; SIGTERM during it ends it at
    its next batch's commit (not at its end, past systemd's stop timeout), exit 0, and
    the next start finishes what it left."""
    import sqlite3

    n = 4000
    log, cfg = configured(tmp_path, make_repo, n)
    db = tmp_path / "l.sqlite"
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("STATUS=initial scan", 60)  # SIGTERM and exit 0 as the block ends
    text = (tmp_path / "daemon.log").read_text()
    assert "stopped between batches" in text and "Traceback" not in text
    with contextlib.closing(sqlite3.connect(db)) as c:
        scored = c.execute("SELECT count(*) FROM scores").fetchone()[0]
    assert scored < n, "the scan ran to its end before stopping"
    (tmp_path / "n.sock").unlink()
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 120)
        assert wait_until(lambda: all((log / f"iter-{k}.score.yaml").is_file() for k in range(1, n + 1)), 60)
    with contextlib.closing(sqlite3.connect(db)) as c:
        assert c.execute("SELECT count(*) FROM scores").fetchone()[0] == n
        assert c.execute("SELECT count(DISTINCT iteration) FROM iterations").fetchone()[0] == n


def test_a_bad_configuration_on_sighup_is_refused_in_one_line(tmp_path: Path, make_repo) -> None:
    log, cfg = configured(tmp_path, make_repo, 2)
    good = cfg.read_text()
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        for k, bad in enumerate((good + '[scoring]\nrubric = "9.9.9"\n', good + "[[broken\n")):
            cfg.write_text(bad)
            proc.send_signal(signal.SIGHUP)
            assert wait_until(lambda k=k: (tmp_path / "daemon.log").read_text().count("reload refused") == k + 1,
                              60)
        (log / "iter-3.yaml").write_text(RECORD.format(n=3, r=0))  # the running configuration still works
        assert wait_until(lambda: (log / "iter-3.score.yaml").is_file(), 60)
    text = (tmp_path / "daemon.log").read_text()
    assert "Traceback" not in text and "configuration reloaded" not in text and "keeping the running" in text


def test_a_file_written_as_a_reload_takes_effect_is_scored(tmp_path: Path, make_repo) -> None:
    """A reload replaces the watcher; a file written between the old one and the new one
    (a gap no watch covers: the write here follows READY at once, as a close-task step
    might) is caught up by the new one, not left to the next reconcile (an hour away)."""
    log, cfg = configured(tmp_path, make_repo, 2, "[daemon]\nreconcile_seconds = 3600\n")
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        for n in range(3, 13):
            readies = sum("READY=1" in m for m in notify.messages)
            proc.send_signal(signal.SIGHUP)
            assert wait_until(lambda: sum("READY=1" in m for m in notify.messages) > readies, 60)
            (log / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=0))
            assert wait_until(lambda: (log / f"iter-{n}.score.yaml").is_file(), 60), n
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def test_a_change_deep_in_the_artifacts_tree_and_a_new_record_are_both_heard(tmp_path: Path) -> None:
    """The log directory is watched for its own entries and the artifacts' tree in depth
    (two watchers: a recursive watch of the log walked every entry of it, 117 ms at 10,000
    iterations): a verification artifact two levels below the tree's root flips while the
    service runs, and the score of the iteration that names it follows; a record closed in
    the log directory is scored too. A reconcile is an hour away: the watches heard both."""
    from agentledger.example import synth

    gen, cfg, sidecar = _generated_service(tmp_path)
    artifact = gen.repo / ".agents/active/verification/task-21/test.result.yaml"
    assert artifact.read_text() != "schema_version: 1\nstatus: fail\n"
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        before = sidecar.read_text()
        artifact.write_text("schema_version: 1\nstatus: fail\n")
        assert wait_until(lambda: "sub_score: 0\n      detail: 1/1 verifiers" in sidecar.read_text(), 60)
        assert sidecar.read_text() != before
        synth.add_iteration(gen, 31)
        assert wait_until(lambda: (gen.log / "iter-31.score.yaml").is_file(), 60)
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def test_a_change_the_watch_follows_through_a_directory_link_out_of_the_repository_is_never_read(
        tmp_path: Path) -> None:
    """The artifacts' tree is watched in depth, and the watch follows a directory link: a
    file written in the directory ``task-31`` leads to (outside the repository) is named to
    the service under the link. The artifact a record names there is refused by name and
    quarantined; nothing of the file reaches the ledger."""
    gen, cfg, _ = _generated_service(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, gen.repo / ".agents/active/verification/task-31")
    art = ".agents/active/verification/task-31/test.result.yaml"
    (gen.log / "iter-31.yaml").write_text(
        "schema_version: 2\niteration: 31\ntask_id: t-31\ncommit: deadbeef\nimpl:\n  summary: \"x\"\n"
        f"verifiers:\n  - type: test\n    status: pass\n    result_artifact: \"{art}\"\n")
    db = tmp_path / "l.sqlite"

    def refused() -> bool:
        return query(db, "SELECT count(*) FROM quarantine WHERE path = ? AND resolved_seq IS NULL"
                         " AND reason LIKE '%symbolic link that leads outside%'", art)[0][0] > 0

    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        assert not refused()  # not there yet: read as missing
        (outside / "test.result.yaml").write_text("schema_version: 1\nstatus: TOP-SECRET-MARKER\n")
        assert wait_until(refused, 60)
    assert query(db, "SELECT count(*) FROM artifacts WHERE path = ?", art) == [(0,)]
    assert query(db, "SELECT count(*) FROM events WHERE payload LIKE '%TOP-SECRET-MARKER%'") == [(0,)]
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def _generated_service(tmp_path: Path):
    """A generated repository of 30 iterations and the service's configuration for it, its
    reconcile an hour away: (the generated log, the configuration, iteration 21's sidecar)."""
    from agentledger.example import synth

    gen = synth.generate(tmp_path / "gen", 30, seed=3)
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "l.sqlite"}"\n[daemon]\nreconcile_seconds = 3600\n'
                   f'[[iteration_logs]]\npath = "{gen.log}"\nrepo = "{gen.repo}"\n')
    return gen, cfg, gen.log / "iter-21.score.yaml"


@pytest.mark.parametrize("polling", [None, True])
def test_the_watches_exist_when_made_and_each_is_as_deep_as_it_was_asked(tmp_path: Path, polling) -> None:
    """``Watches``: changes made right after it is made are heard (the catch-up scan runs
    between the two, not after a first wait); an entry below a flat directory's
    subdirectory is not reported, one below a tree's is; a change in the tree alone comes
    with the next wait; our own temp files and sidecars never do; a set stop event ends
    the wait with None. The same when the file system is polled (``[daemon]
    force_polling``)."""
    import threading

    from agentledger.service.watching import Watches

    flat, tree = tmp_path / "log", tmp_path / "tree"
    (flat / "sub").mkdir(parents=True)
    (tree / "task-1").mkdir(parents=True)
    watches = Watches([flat], [tree], debounce_ms=50, force_polling=polling)
    stop = threading.Event()
    try:
        (flat / "sub" / "deep.yaml").write_text("x")  # below the flat directory: not watched
        (tree / "task-1" / "r.yaml").write_text("x")  # below the tree: watched
        (flat / "iter-1.score.yaml").write_text("x")  # a sidecar of ours: filtered
        (flat / "iter-1.yaml").write_text("x")  # the flat directory's own entry, written last
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while not {"iter-1.yaml", "r.yaml"} <= seen and time.monotonic() < deadline:
            changes = watches.wait(100, stop)
            assert changes is not None
            seen |= {os.path.basename(p) for _, p in changes}
        assert {"iter-1.yaml", "r.yaml"} <= seen
        assert "deep.yaml" not in seen and "iter-1.score.yaml" not in seen
        (tree / "task-1" / "r2.yaml").write_text("x")  # the tree alone moves
        assert wait_until(lambda: any(p.endswith("r2.yaml") for _, p in watches.wait(100, stop) or ()), 30)
        stop.set()
        assert watches.wait(100, stop) is None
    finally:
        watches.close()
    gone = tmp_path / "gone"  # listed, then removed before the watch is made: left out, not fatal
    alone = Watches([gone], [tree], debounce_ms=50)  # only trees left: theirs is the watcher a wait blocks on
    try:
        assert alone.groups == [([tree], True), ([tmp_path], False)]  # then gone's parent, watched for it
        (tree / "task-1" / "r3.yaml").write_text("x")
        assert wait_until(lambda: any(p.endswith("r3.yaml") for _, p in alone.wait(100, threading.Event()) or ()), 30)
    finally:
        alone.close()


@pytest.mark.parametrize("polling", [None, True])
def test_a_missing_directory_is_watched_for_through_its_nearest_ancestor(tmp_path: Path, polling) -> None:
    """A configured directory that is not there yet: its nearest existing ancestor is
    watched for its own entries; as ``mkdir -p`` makes the way down, each step sets
    ``moved`` (the service then watches anew), and the ancestor's other entries are never
    reported as changes."""
    import threading

    from agentledger.service.watching import Watches

    log, plans = tmp_path / "repo" / "log", tmp_path / "repo" / ".agents" / "workflow" / "plans"
    log.mkdir(parents=True)
    stop = threading.Event()
    watches = Watches([log], [plans], debounce_ms=50, force_polling=polling)
    try:
        assert watches.missing == {plans: tmp_path / "repo"} and watches.watched == 1
        assert watches.groups == [([log, tmp_path / "repo"], False)]  # the ancestor rides with the log
        (tmp_path / "repo" / "README").write_text("x")  # the ancestor's own entry: no change, nothing moved
        (log / "iter-1.yaml").write_text("x")
        assert wait_until(lambda: any(p.endswith("iter-1.yaml") for _, p in watches.wait(100, stop) or ()), 30)
        assert not watches.moved
        assert not any(p.endswith("README") for _, p in watches.wait(200, stop) or ())
        (tmp_path / "repo" / ".agents").mkdir()  # a step nearer
        assert wait_until(lambda: watches.wait(100, stop) is not None and watches.moved, 30)
        assert watches.appeared() == [plans]
    finally:
        watches.close()
    nearer = Watches([log], [plans], debounce_ms=50, force_polling=polling)
    try:
        assert nearer.missing == {plans: tmp_path / "repo" / ".agents"}
        (tmp_path / "repo" / ".agents").rmdir()  # the ancestor watched for it goes: watched for anew
        assert wait_until(lambda: nearer.wait(100, stop) is not None and nearer.moved, 30)
        assert nearer.appeared() == [plans]
    finally:
        nearer.close()
    (plans / "task-1").mkdir(parents=True)
    again = Watches([log], [plans], debounce_ms=50, force_polling=polling)  # what the service makes next
    try:
        # each present one's parent is watched for its entry (the ancestors ride with the log)
        assert again.missing == {} and again.groups == [([log, tmp_path / "repo", plans.parent], False),
                                                        ([plans], True)]
        (plans / "task-1" / "TASK.yaml").write_text("x")
        assert wait_until(lambda: any(p.endswith("TASK.yaml") for _, p in again.wait(100, stop) or ()), 30)
        assert not again.moved
        (plans / "task-1" / "TASK.yaml").unlink()
        (plans / "task-1").rmdir()
        plans.rename(plans.parent / "plans-aside")  # gone (renamed away: its watch went along)
        assert wait_until(lambda: again.wait(100, stop) is not None and again.moved, 30)
        assert again.appeared() == [plans]
    finally:
        again.close()


def test_a_verification_directory_made_while_the_service_runs_is_watched(tmp_path: Path) -> None:
    """The artifacts' tree is missing when the service starts (a repository whose agent has
    verified nothing yet); it appears whole (moved into place), then one of its artifacts
    flips: the service watched its parent for it, watched it anew and heard the flip,
    with a reconcile an hour away."""
    gen, cfg, sidecar = _generated_service(tmp_path)
    verification = gen.repo / ".agents/active/verification"
    aside = tmp_path / "verification-aside"
    verification.rename(aside)
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        verifier = "signal: verifier\n      label: Verifier results\n      present: {}\n      sub_score: {}\n"
        assert verifier.format("false", 0) in sidecar.read_text()  # its artifact is not there
        aside.rename(verification)
        assert wait_until(lambda: "watching anew" in (tmp_path / "daemon.log").read_text(), 60)
        assert wait_until(lambda: verifier.format("true", 0.5) in sidecar.read_text(), 60)  # the catch-up read it
        (verification / "task-21/test.result.yaml").write_text("schema_version: 1\nstatus: fail\n")
        assert wait_until(lambda: verifier.format("true", 0) in sidecar.read_text(), 60)  # the new watch heard it
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def test_a_watched_directory_removed_and_made_again_is_watched_again(tmp_path: Path) -> None:
    """The artifacts' tree is there when the service starts; a tool removes it and makes it
    again (a clean-up between tasks), with one artifact changed; later another flips. Its
    watch died with it: the service watches its parent for its entry, watches it anew and
    scans, and hears the later flip, with a reconcile an hour away."""
    import shutil

    gen, cfg, sidecar = _generated_service(tmp_path)
    verification = gen.repo / ".agents/active/verification"
    verifier = "signal: verifier\n      label: Verifier results\n      present: true\n      sub_score: {}\n"
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        assert verifier.format(0.5) in sidecar.read_text()
        kept = tmp_path / "kept"
        shutil.copytree(verification, kept)
        shutil.rmtree(verification)
        (kept / "task-21/test.result.yaml").write_text("schema_version: 1\nstatus: fail\n")
        shutil.copytree(kept, verification)
        assert wait_until(lambda: verifier.format(0) in sidecar.read_text(), 60)
        (verification / "task-21/test.result.yaml").write_text("schema_version: 1\nstatus: pass\n")
        assert wait_until(lambda: "signal: verifier" in (text := sidecar.read_text())
                          and verifier.format(0) not in text, 60)  # the new watch heard it
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def test_a_directory_flipping_in_and_out_of_place_makes_few_rescans_and_no_failure(tmp_path: Path) -> None:
    """Someone who can write in the repository moves a missing watched directory in and
    out of place as fast as they can: each appearance would make the service watch anew
    and scan everything again. It watches anew at most once every REWATCH_GAP_S (what
    appeared meanwhile waits for that scan: nothing is lost), its loop outlives a watch
    made on a directory that is gone again, and once the flipping stops with the
    directory in place its artifacts are read."""
    from agentledger.service.daemon import REWATCH_GAP_S

    gen, cfg, sidecar = _generated_service(tmp_path)
    verification = gen.repo / ".agents/active/verification"
    aside = tmp_path / "verification-aside"
    verification.rename(aside)
    log = tmp_path / "daemon.log"
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        began = time.monotonic()
        flips = 0
        while time.monotonic() - began < 2 * REWATCH_GAP_S:  # the attack: two gaps' worth of flipping
            aside.rename(verification)
            verification.rename(aside)
            flips += 1
        aside.rename(verification)
        verifier = "signal: verifier\n      label: Verifier results\n      present: true\n      sub_score: 0.5\n"
        assert wait_until(lambda: verifier in sidecar.read_text(), 60)  # the last watch's scan read it
        elapsed = time.monotonic() - began
        rewatches = log.read_text().count("watching anew")
        assert flips > 100 and 1 <= rewatches <= 2 + elapsed / REWATCH_GAP_S, (flips, rewatches, elapsed)
        assert proc.poll() is None
        (verification / "task-21/test.result.yaml").write_text("schema_version: 1\nstatus: fail\n")
        assert wait_until(lambda: verifier.replace("0.5", "0") in sidecar.read_text(), 60)  # and it watches it
    assert "Traceback" not in log.read_text()


def test_ship_without_the_central_extra_is_one_line_and_run_does_not_retry(tmp_path: Path, make_repo) -> None:
    """psycopg made unimportable in the child (sys.modules entry None: what a missing package looks like)."""
    log, cfg = configured(tmp_path, make_repo, 2, '[[ship]]\nurl = "postgresql://x@127.0.0.1:1/t"\n')
    no_psycopg = "import sys; sys.modules['psycopg'] = None; from agentledger.cli import main; sys.exit(main())"
    assert subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--config", str(cfg)],
                          capture_output=True).returncode == 0
    proc = subprocess.run([sys.executable, "-c", no_psycopg, "ship", "--config", str(cfg)], capture_output=True,
                          text=True, timeout=60)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "[central]" in lines[0] and "Traceback" not in proc.stderr
    notify = Notify(tmp_path / "n2.sock")
    run = subprocess.Popen([sys.executable, "-c", no_psycopg, "run", "--config", str(cfg), "--log-format", "console"],
                           stdout=(tmp_path / "d2.log").open("w"), stderr=subprocess.STDOUT,
                           env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
    try:
        assert notify.wait_for("READY=1", 60)
        (log / "iter-3.yaml").write_text(RECORD.format(n=3, r=0))
        assert wait_until(lambda: (log / "iter-3.score.yaml").is_file(), 60)
        run.send_signal(signal.SIGTERM)
        assert run.wait(30) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        notify.close()
    text = (tmp_path / "d2.log").read_text()
    assert text.count("shipping is off") == 1 and "Traceback" not in text and "will retry" not in text


def _daemon(tmp_path: Path):
    from agentledger.config import Config, StoreConfig
    from agentledger.service.daemon import Daemon

    return Daemon(lambda: Config(store=StoreConfig(path=tmp_path / "l.sqlite")))


@contextlib.contextmanager
def _handlers_restored():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_the_services_signal_handlers_call_nothing_that_can_wait(tmp_path: Path) -> None:
    """A signal handler runs in the main thread between two of its bytecodes, whatever lock
    that thread holds then: one that waits for a lock (a queue's, a logger's, an Event's)
    can wait forever. SIGHUP's put a "reload" request on the main loop's queue, and the
    service was found wedged for good (its main thread in ``Queue.get_nowait``, the handler
    in ``Queue.put`` of the same queue; SIGTERM no longer stopped it); SIGTERM's logged and
    set an Event. Each handler now only sets a flag."""
    from agentledger.service.signals import SignalFlag

    d = _daemon(tmp_path)
    with _handlers_restored():
        d.signals.install()
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            handler = signal.getsignal(sig)
            calls: list[str] = []

            def profile(frame, event, arg, handler_code=getattr(handler, "__code__", None)):
                if event == "c_call" and arg is not sys.setprofile:
                    calls.append(f"C {arg.__qualname__}")
                elif event == "call" and frame.f_code is not handler_code:
                    calls.append(f"{frame.f_code.co_qualname}")

            sys.setprofile(profile)
            try:
                handler(sig, None)
            finally:
                sys.setprofile(None)
            allowed = {f"SignalFlag.{m}" for m in ("set",)}
            assert [c for c in calls if c not in allowed] == [], (signal.Signals(sig).name, calls)
    assert isinstance(d.stop, SignalFlag) and d.stop.is_set() and d.signals.reload.is_set()
    assert d.signals.stop_signal == signal.SIGINT and list(d.requests.queue) == []  # the main loop makes the request


def test_a_sighup_while_the_main_loop_holds_its_queue_is_taken_not_a_hang(tmp_path: Path) -> None:
    """The wedge itself, with a real signal: the main thread holds the request queue's lock
    (as ``Queue.get_nowait`` does, every tick of the loop) when SIGHUP arrives; the handler
    ran there and waited for that lock for ever. A process of its own, so that a hang is a
    timeout, not a stuck test run."""
    script = f"""
import os, signal, sys
from pathlib import Path
from agentledger.config import Config, StoreConfig
from agentledger.service.daemon import Daemon
d = Daemon(lambda: Config(store=StoreConfig(path=Path({str(tmp_path / 'l.sqlite')!r}))))
d.signals.install()
with d.requests.mutex:
    os.kill(os.getpid(), signal.SIGHUP)
    for _ in range(1000):  # the handler runs at one of these bytecodes, the lock held
        pass
print("asked", d.signals.reload.is_set())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "asked True"
