"""The close-task hook answered by the running service (``service/hook.py``): the answer is
the one the hook would print itself, and the socket answers only its own user, only for
the sources the service watches under the same settings; a dead service costs nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentledger import __version__
from agentledger.service import hook

from .test_daemon import RECORD, Notify, running, wait_until

WHATEVER_CHANGES = {"rescored", "sidecar_written"}  # who scored it first: the service's watch or the hook


def setup(tmp_path: Path, make_repo, n: int, store: Path | None = None) -> tuple[Path, Path, Path]:
    """A log of ``n`` closed iterations and a config naming it: (log, config, ledger)."""
    repo = make_repo()
    log = tmp_path / "log"
    log.mkdir()
    for k in range(1, n + 1):
        (log / f"iter-{k}.yaml").write_text(RECORD.format(n=k, r=k % 3))
    db = store or tmp_path / "l.sqlite"
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[[iteration_logs]]\npath = "{log}"\nrepo = "{repo.path}"\n')
    return log, cfg, db


def score(cfg: Path, n: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--config", str(cfg), "score", str(n), *extra],
                          capture_output=True, text=True, timeout=120)


def daemon_log(tmp_path: Path) -> str:
    return (tmp_path / "daemon.log").read_text()


def test_the_service_answers_the_hook_with_what_the_hook_prints_itself(tmp_path: Path, make_repo) -> None:
    # a ledger whose socket path is longer than a unix socket address holds (108 bytes)
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    log, cfg, db = setup(tmp_path, make_repo, 3, deep / "l.sqlite")
    sock = Path(f"{db}.hook.sock")
    assert len(os.fsencode(sock)) > 108
    with running(tmp_path, cfg) as (proc, notify):
        notify.wait_for("READY=1", 60)
        assert sock.exists() and (sock.stat().st_mode & 0o777) == 0o600
        (log / "iter-4.yaml").write_text(RECORD.format(n=4, r=1))
        served = score(cfg, 4, "--json")
        assert served.returncode == 0, served.stderr
        assert wait_until(lambda: "close-task hook answered" in daemon_log(tmp_path), 10), daemon_log(tmp_path)
        itself = score(cfg, 4, "--json", "--in-process")
        assert itself.returncode == 0, itself.stderr
        a, b = json.loads(served.stdout), json.loads(itself.stdout)
        assert {k: v for k, v in a.items() if k not in WHATEVER_CHANGES} == \
               {k: v for k, v in b.items() if k not in WHATEVER_CHANGES}
        assert a["score_band"] and Path(a["sidecar_path"]).read_text().startswith("iteration: 4")
        # the text a person reads is the same too (but for who wrote the sidecar first)
        text_served, text_itself = score(cfg, 4), score(cfg, 4, "--in-process")
        assert text_served.stdout == text_itself.stdout and "iter-4:" in text_served.stdout
        assert daemon_log(tmp_path).count("close-task hook answered") == 2
    assert not sock.exists()  # a stopped service leaves no socket behind


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_the_hook_socket_refuses_another_user(tmp_path: Path, make_repo) -> None:
    # the ledger (and so its socket) where another user can walk to it: pytest's own
    # temp directories are 0700, which would keep them out before the socket's mode does
    shared = Path(tempfile.mkdtemp(prefix="hook-socket-test-", dir="/tmp"))
    shared.chmod(0o755)
    try:
        _refuses_another_user(tmp_path, make_repo, shared / "l.sqlite")
    finally:
        shutil.rmtree(shared)


def _refuses_another_user(tmp_path: Path, make_repo, db: Path) -> None:
    from agentledger import config as C
    from agentledger.service import hook

    log, cfg, db = setup(tmp_path, make_repo, 2, db)
    sock = Path(f"{db}.hook.sock")
    loaded = C.load(str(cfg))
    request = json.dumps({"protocol": hook.PROTOCOL, "iteration": 1, "json": True, "quiet": False,
                          "fingerprint": hook.fingerprint(loaded, loaded.iteration_logs[0])}).encode() + b"\n"

    def as_nobody() -> str:
        """What user 65534 gets from the socket: 'denied', 'no answer' or the answer."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.close(r)
            try:
                os.setgid(65534)
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(10)
                    s.connect(str(sock))
                    try:
                        s.sendall(request)
                        got = s.recv(65536)
                    except (ConnectionResetError, BrokenPipeError):  # closed on it, the request unread
                        got = b""
                os.write(w, b"answered: " + got if got else b"no answer")
            except PermissionError:
                os.write(w, b"denied")
            except BaseException as exc:
                os.write(w, repr(exc).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            said = fh.read().decode()
        os.waitpid(pid, 0)
        return said

    with running(tmp_path, cfg) as (proc, notify):
        notify.wait_for("READY=1", 60)
        assert as_nobody() == "denied"  # mode 0600: the file system keeps others out
        sock.chmod(0o666)  # and were they let in, the service still asks who is calling
        assert as_nobody() == "no answer"
        assert wait_until(lambda: "refused: another user" in daemon_log(tmp_path), 10)
        assert "close-task hook answered" not in daemon_log(tmp_path)
        mine = score(cfg, 1, "--json")  # its own user is still answered
        assert mine.returncode == 0, mine.stderr
        assert wait_until(lambda: "close-task hook answered" in daemon_log(tmp_path), 10)
        assert proc.poll() is None


def test_the_service_answers_nothing_else_and_the_hook_works_itself(tmp_path: Path, make_repo) -> None:
    log, cfg, db = setup(tmp_path, make_repo, 2)
    sock = str(Path(f"{db}.hook.sock"))
    repo = next(p for p in tmp_path.iterdir() if p.name == "repo")
    other = tmp_path / "other-log"
    other.mkdir()
    (other / "iter-1.yaml").write_text(RECORD.format(n=1, r=2))

    def raw(data: bytes, *, shut: bool = True) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(sock)
            try:
                s.sendall(data)
                if shut:
                    s.shutdown(socket.SHUT_WR)
                return s.recv(65536)
            except (BrokenPipeError, ConnectionResetError):
                return b""

    with running(tmp_path, cfg) as (proc, notify):
        notify.wait_for("READY=1", 60)
        # a source the service does not watch: refused, and the hook scores it itself
        elsewhere = subprocess.run(
            [sys.executable, "-m", "agentledger", "score", "1", "--json", "--iteration-log", str(other),
             "--repo", str(repo), "--db", str(db)], capture_output=True, text=True, timeout=120)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert json.loads(elsewhere.stdout)["iteration"] == 1 and (other / "iter-1.score.yaml").exists()
        # the same source under another setting (a rubric flag): refused too, and done right
        flagged = score(cfg, 1, "--json", "--rubric", "3.0.0")
        assert flagged.returncode == 0 and json.loads(flagged.stdout)["rubric_version"] == "3.0.0"
        assert daemon_log(tmp_path).count("refused: not a source") == 2
        # what is not a request gets nothing, whatever it is
        assert raw(b"x" * (hook.MAX_REQUEST + 10)) == b""  # too long
        assert raw(b"not a request\n") == b""
        assert raw(json.dumps({"protocol": 1, "iteration": 1}).encode() + b"\n") == b""  # the first protocol
        assert raw(hook.MAGIC + b"\0two\0x\0y\0z\0w") == b""  # fields that are not what they say

        def request(argv: list[str], **changed) -> bytes:
            fields = {"argv": argv, "cwd": str(tmp_path), "env": dict(os.environ), "umask": 0o022,
                      "version": __version__, **changed}
            return hook.encode_request(**fields)

        def events() -> int:
            with sqlite3.connect(db) as c:
                return c.execute("SELECT count(*) FROM events").fetchone()[0]

        before = events()
        mine = ["--config", str(cfg), "score", "1"]
        # the service runs `score` and nothing else: another command line (holding the word
        # `score` or not), another version, a directory or umask that is not one: refused
        for bad in (request(["--config", str(cfg), "ingest", "--trunk", "score"]),
                    request(["--config", str(cfg), "backfill", "--rubric", "3.0.0", "--source", "score"]),
                    request(["--config", str(cfg), "status"]), request(mine, version="0.0.0"),
                    request(mine, cwd="relative/dir"), request(mine, cwd=str(tmp_path / "gone")),
                    request(mine, umask=0o7777), request(["--config", str(cfg), "score", "--nosuchflag", "1"])):
            assert raw(bad).startswith(b"refused "), bad
        assert events() == before  # nothing was ingested, backfilled or scored for them
        assert raw(request(mine)).startswith(b"ok 0 ")  # and a request as the hook makes it is answered
        # the environment a request carries is the hook's: used, never logged
        secret = {**os.environ, "SOME_API_TOKEN": "s3cr3t-value-of-the-hook"}
        assert raw(request(mine, env=secret)).startswith(b"ok 0 ")
        assert raw(request(["--config", str(cfg), "status"], env=secret)).startswith(b"refused ")
        assert raw(request(mine, env=secret, version="0.0.0")).startswith(b"refused ")
        assert wait_until(lambda: daemon_log(tmp_path).count("refused: another version") == 2, 10)
        assert "s3cr3t" not in daemon_log(tmp_path)
        # a caller that connects and says nothing holds the service up for seconds, not for ever
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
            silent.connect(sock)
            late = score(cfg, 2, "--json")
        assert late.returncode == 0, late.stderr
        assert "close-task hook answered" in daemon_log(tmp_path)
        # nor does one that trickles its request in a byte at a time: READ_TIMEOUT is for all of it
        started = time.monotonic()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as trickle:
            trickle.connect(sock)
            trickle.settimeout(0.5)
            while time.monotonic() - started < 30:
                try:
                    trickle.send(b"a")
                    if trickle.recv(1) == b"":
                        break  # closed on it
                except TimeoutError:
                    continue
                except OSError:
                    break
        assert time.monotonic() - started < hook.READ_TIMEOUT + 5
        # a flood of callers: a few are answered at once, the rest are closed (their hooks work themselves)
        flood = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(hook.MAX_ANSWERING + 4)]
        try:
            for c in flood:
                c.connect(sock)
            assert wait_until(lambda: "too many at once" in daemon_log(tmp_path), 10), daemon_log(tmp_path)
            zygote = next(p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == proc.pid
                          and b"agentledger.cli.served" in _cmdline(p))
            assert sum(_parent(p) == int(zygote) for p in os.listdir("/proc") if p.isdigit()) <= hook.MAX_ANSWERING
            crowded = score(cfg, 2, "--json")  # answered or done itself: the same either way
            assert crowded.returncode == 0 and json.loads(crowded.stdout)["iteration"] == 2, crowded.stderr
        finally:
            for c in flood:
                c.close()
        assert proc.poll() is None


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return b""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for whoever inherited it counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _parent(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def test_a_killed_service_leaves_a_socket_the_hook_works_past(tmp_path: Path, make_repo) -> None:
    log, cfg, db = setup(tmp_path, make_repo, 2)
    sock = Path(f"{db}.hook.sock")
    notify = Notify(tmp_path / "first.sock")
    env = {**os.environ, "NOTIFY_SOCKET": str(notify.path)}
    first = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--config", str(cfg)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        notify.wait_for("READY=1", 60)
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert sock.exists()  # nobody removed it
        (log / "iter-3.yaml").write_text(RECORD.format(n=3, r=0))
        alone = score(cfg, 3, "--json")  # nobody listens: the hook works itself
        assert alone.returncode == 0, alone.stderr
        assert json.loads(alone.stdout)["rescored"] is True
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        notify.close()
    with running(tmp_path, cfg) as (proc, notify):  # the next service takes the socket over
        notify.wait_for("READY=1", 60)
        (log / "iter-4.yaml").write_text(RECORD.format(n=4, r=0))
        again = score(cfg, 4, "--json")
        assert again.returncode == 0, again.stderr
        assert wait_until(lambda: "close-task hook answered" in daemon_log(tmp_path), 10)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_the_hook_never_prints_what_another_users_socket_says(tmp_path: Path, make_repo) -> None:
    """Another user's listener at the socket's path (a directory others can write to)
    answers a forged score in the service's own format: the hook never sends it its
    command line or environment (a secret in it included), does not print its answer,
    and works itself."""
    shared = Path(tempfile.mkdtemp(prefix="hook-socket-test-", dir="/tmp"))
    shared.chmod(0o777)
    forged = hook.encode_answer(0, "iter-1: 1.0000 forged\n", "")
    r, w = os.pipe()
    heard_r, heard_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child: the other user's fake service
        try:
            os.close(r)
            os.close(heard_r)
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
                srv.bind(str(shared / "l.sqlite.hook.sock"))
                os.chmod(shared / "l.sqlite.hook.sock", 0o777)
                srv.listen(4)
                os.write(w, b"up")
                srv.settimeout(60)
                while True:
                    conn, _ = srv.accept()
                    with conn:
                        conn.settimeout(5)
                        got = b""
                        try:
                            while chunk := conn.recv(65536):  # the request, as a real service reads it
                                got += chunk
                        except OSError:
                            pass
                        os.write(heard_w, b"connected:" + got[:200] + b"\n")
                        conn.sendall(forged)
        finally:
            os._exit(0)
    os.close(w)
    os.close(heard_w)
    try:
        assert os.read(r, 2) == b"up"
        log, cfg, db = setup(tmp_path, make_repo, 1, shared / "l.sqlite")
        env = {**os.environ, "SOME_API_TOKEN": "s3cr3t-in-the-hooks-environment"}
        done = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(cfg), "score", "1"],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert "forged" not in done.stdout and "iter-1:" in done.stdout
        assert (log / "iter-1.score.yaml").exists()
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        shutil.rmtree(shared)
    with os.fdopen(heard_r, "rb") as fh:
        assert fh.read() == b""  # it was never even connected to


def test_the_hooks_first_look_finds_the_ledger_the_configuration_names(tmp_path: Path, monkeypatch) -> None:
    """The launcher finds the service's socket before it parses anything (``store_of``):
    for each way a ledger is named (flag, environment, configuration file found each way,
    the default), the same ledger as the full parser and configuration, and no guess at
    all for a command line it is not sure of. Its table of ``score``'s flags is the parser's."""
    from agentledger.cli import build_parser
    from agentledger.cli.common import load_config

    home, state, xdg = tmp_path / "home", tmp_path / "state", tmp_path / "xdg"
    for d in (home, state, xdg / "agentledger", tmp_path / "etc", tmp_path / "cwd"):
        d.mkdir(parents=True)
    (tmp_path / "etc" / "named.toml").write_text('[store]\npath = "rel/by-file.sqlite"\n')
    (xdg / "agentledger" / "agentledger.toml").write_text('[store]\npath = "~/by-xdg.sqlite"\n')
    cwd = tmp_path / "cwd"
    monkeypatch.chdir(cwd)
    for name in [k for k in os.environ if k.startswith("AGENTLEDGER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config-here"))

    def both(argv: list[str]) -> tuple[str, str]:
        guess = hook.store_of(argv, os.environ)
        assert guess is not None, argv
        return os.path.abspath(guess), os.path.abspath(load_config(build_parser().parse_args(argv)).store.path)

    cases = [["score", "1"], ["score", "1", "--db", "rel.sqlite"], ["--db=~/tilde.sqlite", "score", "2", "-q"],
             ["--config", str(tmp_path / "etc" / "named.toml"), "score", "3", "--json"],
             ["--config", str(tmp_path / "etc" / "named.toml"), "score", "3", "--db", "last.sqlite"],
             ["score", "--source", "x", "4", "--rubric=3.0.0"]]
    for argv in cases:
        guess, real = both(argv)
        assert guess == real, argv
    monkeypatch.setenv("AGENTLEDGER_CONFIG", str(tmp_path / "etc" / "named.toml"))
    assert both(["score", "1"])[0] == str(tmp_path / "etc" / "rel" / "by-file.sqlite") == both(["score", "1"])[1]
    monkeypatch.setenv("AGENTLEDGER_STORE_PATH", "~/by-env.sqlite")
    assert both(["score", "1"])[0] == str(home / "by-env.sqlite") == both(["score", "1"])[1]
    monkeypatch.delenv("AGENTLEDGER_STORE_PATH")
    monkeypatch.delenv("AGENTLEDGER_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert both(["score", "1"])[0] == str(home / "by-xdg.sqlite") == both(["score", "1"])[1]
    (cwd / "agentledger.toml").write_text('[store]\npath = "here.sqlite"\n')  # the directory's wins
    assert both(["score", "1"])[0] == str(cwd / "here.sqlite") == both(["score", "1"])[1]
    for unsure in (["score"], ["score", "1", "2"], ["status"], ["score", "1", "--he"], ["score", "--help"],
                   ["score", "1", "--db"], ["score", "-1"], ["--version"], ["score", "1", "--json=yes"],
                   ["score", "1", "--in-process"]):  # (that one works itself: nothing to look for)
        assert hook.store_of(unsure, os.environ) is None, unsure
    (cwd / "agentledger.toml").write_text("not toml [")
    assert hook.store_of(["score", "1"], os.environ) is None  # the parser's to report
    # the flags it reads are those of `score` and of the command line around it
    parser = build_parser("ingest", "score")
    score = parser._subparsers._group_actions[0].choices["score"]
    flags = {o: a.nargs != 0 for p in (parser, score) for a in p._actions for o in a.option_strings
             if o not in ("-h", "--help", "--version")}
    assert flags == {**dict.fromkeys(hook._VALUED, True), **dict.fromkeys(hook._FLAGS, False)}


def test_the_hook_is_answered_in_its_own_directory_and_the_warm_copy_ends_with_the_service(
        tmp_path: Path, make_repo) -> None:
    """A hook run with no flag at all, in a directory whose ``agentledger.toml`` names the
    ledger and the log by relative paths: the service answers it as resolved there. A
    request in flight ends with the warm copy of the command line when that is killed,
    and the service then leaves no socket to wait on. A warm copy ends when its service
    stops, and when its service is killed."""
    log, cfg, db = setup(tmp_path, make_repo, 2)
    repo = next(p for p in tmp_path.iterdir() if p.name == "repo")
    work = tmp_path / "work"
    work.mkdir()
    (work / "agentledger.toml").write_text(
        f'[store]\npath = "../{db.name}"\n[[iteration_logs]]\npath = "../{log.name}"\nrepo = "{repo}"\n')

    def served_copies() -> list[int]:
        out = []
        for pid in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"agentledger.cli.served" in cmd:
                out.append(int(pid))
        return out

    with running(tmp_path, cfg) as (proc, notify):
        notify.wait_for("READY=1", 60)
        copies = [p for p in served_copies() if _parent(str(p)) == proc.pid]
        assert len(copies) == 1
        (log / "iter-3.yaml").write_text(RECORD.format(n=3, r=2))
        here = subprocess.run([sys.executable, "-m", "agentledger", "score", "3", "--json"], cwd=work,
                              capture_output=True, text=True, timeout=120)
        assert here.returncode == 0, here.stderr
        assert json.loads(here.stdout)["sidecar_path"] == str(log / "iter-3.score.yaml")
        assert wait_until(lambda: "close-task hook answered" in daemon_log(tmp_path), 10), daemon_log(tmp_path)
        # a request in flight (a caller that has not finished sending) has a process of its own,
        # which ends with the warm copy however that ends (here: SIGKILL), not at its READ_TIMEOUT
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(db) + ".hook.sock")
        connected = time.monotonic()
        assert wait_until(lambda: any(_parent(p) == copies[0] for p in os.listdir("/proc") if p.isdigit()), 10)
        answering = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(p) == copies[0]]
        os.kill(copies[0], signal.SIGKILL)
        assert wait_until(lambda: not any(_alive(p) for p in answering), 10)
        assert time.monotonic() - connected < hook.READ_TIMEOUT
        silent.close()
        # the service saw its warm copy go: no socket left to wait on, the hook works itself
        assert wait_until(lambda: "close-task hook's server exited" in daemon_log(tmp_path), 10)
        assert not Path(str(db) + ".hook.sock").exists()
        (log / "iter-4.yaml").write_text(RECORD.format(n=4, r=1))
        alone = subprocess.run([sys.executable, "-m", "agentledger", "score", "4", "--json"], cwd=work,
                               capture_output=True, text=True, timeout=120)
        assert alone.returncode == 0 and json.loads(alone.stdout)["iteration"] == 4, alone.stderr
        assert proc.poll() is None
    assert wait_until(lambda: not any(_alive(p) for p in copies), 10)
    notify = Notify(tmp_path / "second.sock")
    killed = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--config", str(cfg)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
    try:
        notify.wait_for("READY=1", 60)
        assert wait_until(lambda: any(_parent(str(p)) == killed.pid
                                      for p in served_copies()), 10)
        copies = [p for p in served_copies() if _parent(str(p)) == killed.pid]
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert wait_until(lambda: not any(_alive(p) for p in copies), 10)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
        notify.close()


WARM_THEN_SCORE = r"""
import json, sys
from agentledger.cli import served
from agentledger.service import hook  # what the warm copy itself imports before it warms
served._warm()
before = set(sys.modules)
from agentledger.cli import main
code = main(sys.argv[1:])
print("\n" + json.dumps({"code": code, "new": sorted(m for m in set(sys.modules) - before if m.startswith("agentledger"))}))
"""


def test_the_warm_copy_imports_everything_an_answer_imports(tmp_path: Path) -> None:
    """Each answering process is forked from the warm copy: a module the `score` path
    imports that the warm copy did not is imported again in every answer (a few ms a
    close, silently). A new iteration scored after `_warm()` must import nothing of ours."""
    from agentledger.example import synth

    gen = synth.generate(tmp_path / "gen", 12, seed=4)
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(tmp_path / "l.sqlite")]
    assert subprocess.run([sys.executable, "-m", "agentledger", "ingest", *args, "-q"]).returncode == 0
    synth.add_iteration(gen, 13)
    proc = subprocess.run([sys.executable, "-c", WARM_THEN_SCORE, "score", "13", *args, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["code"] == 0 and said["new"] == [], said
    assert (gen.log / "iter-13.score.yaml").is_file()
