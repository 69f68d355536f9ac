"""The close-task hook answered by the running service.

``agentledger score N`` is run by the agent workflow after each iteration closes, and
the workflow waits for it. Run on its own, most of its time is starting Python and
importing the ledger (~90 ms of ~170 ms). So when a service runs on the same ledger, the
hook hands its command line, directory and environment to the service over a unix socket
beside the ledger (``<ledger>.hook.sock``) and prints the answer. The service runs that
command line in a process forked from a warm copy of the command line (``cli/served.py``,
started once with the service): in the hook's directory, with its environment and umask,
through the same code, so the answer is the same bytes, exit code and side effects as
the hook's own. Before anything else the launcher (``__main__``) looks for the service
with the standard library alone (``quick``): the command line, the environment and the
configuration file say which ledger, and so which socket. When no service answers, or it
refuses, the hook does the work itself, as before.

What the socket trusts, and why it is safe to offer:

* Only this user, both ways. The socket is made with mode 0600, and each connection's
  peer credentials (``SO_PEERCRED``) must carry the service's own uid, so another user
  (root included) who reaches it anyway is refused; and the hook talks only to a socket
  file of its own user whose listener runs as that user, so what another user's process
  says is never printed as a score. The environment a request carries (which may hold
  secrets) goes only to a process of the same user, and is never logged.
* Only what the service would do anyway. The command line must be ``score``; it is
  resolved as the hook would resolve it (flags, environment, configuration file, in the
  hook's directory), and answered only when it names an iteration log the service
  watches under the same settings (``fingerprint``: every setting a score or a sidecar
  depends on, and the agentledger version). Anything else (another source, another
  rubric flag, a usage error, another version) is refused before any work, and the hook
  works in its own process. Nothing else can be asked.
* Bounded. A request is at most ``MAX_REQUEST`` bytes, all read within ``READ_TIMEOUT``
  seconds; anything else is dropped without an answer. Each request has a process of its
  own, which ends when its answer is sent, or with the warm copy; at most
  ``MAX_ANSWERING`` at once (a connection past them is closed and its hook works itself).

This module imports only the standard library, and on the hook's path only what the
client half needs (no json, socket, pathlib, subprocess or threading: ~20 ms of a ~60 ms
answer): it runs before anything else. So the request and the answer are not JSON but
byte strings of NUL-separated fields (a command line, a directory and an environment
hold no NUL) and length-prefixed output (``encode_request``, ``encode_answer``).
"""

from __future__ import annotations

import _socket  # the C module: socket.py (its enums, selectors) costs ~8 ms on the hook's path
import os
import stat
import struct

from .. import paths

PROTOCOL = 2
MAGIC = b"agentledger-hook"  # a request's first field
MAX_REQUEST = 1 << 20  # bytes: a request is a command line, a directory and an environment
READ_TIMEOUT = 5.0  # seconds a connection has to send its whole request
MAX_ANSWERING = 8  # requests answered at once; a connection past them is closed (its hook works itself)
CONNECT_TIMEOUT = 1.0  # seconds the hook waits to be accepted before working itself
ANSWER_TIMEOUT = 600.0  # seconds it waits for the answer (the work may wait for the ledger's write lock)
_PATH_MAX = 100  # sun_path holds 108 bytes; a longer path is reached through its directory's descriptor
SERVER_MODULE = "agentledger.cli.served"  # the warm copy of the command line (run by name: nothing imports cli)

# In a process the warm copy forked to answer a request: the fingerprints the service
# answers for (``cmd_score`` refuses any other by raising ``NotServed``); None elsewhere.
SERVING: frozenset[str] | None = None
_asked: set[str] = set()  # sockets this process asked already (the launcher's look, then cmd_score's)


class NotServed(Exception):
    """In an answering process: the command line names what the service does not serve."""


def socket_path(store: str | os.PathLike) -> str:
    return os.path.abspath(f"{os.fspath(store)}.hook.sock")


def fingerprint(cfg, src) -> str:
    """What must be equal for the service's answer to be the one this process would give:
    the agentledger version, the ledger file, the iteration log (directory, repository,
    trunk, name, transcripts) and every setting a score or sidecar depends on (a few
    hundred bytes, compared whole)."""
    from .. import __version__

    return repr((PROTOCOL, __version__, os.path.abspath(cfg.store.path), cfg.store.synchronous, src, cfg.scoring,
                 cfg.sidecars, cfg.limits, cfg.detect, cfg.explicit_rubric))


def _address(path: str) -> tuple[str, int | None]:
    """An address ``bind``/``connect`` accept for ``path`` (and a directory descriptor to
    close after), whatever its length: a long one through ``/proc/self/fd``."""
    if len(os.fsencode(path)) < _PATH_MAX:
        return path, None
    parent, name = os.path.split(path)
    dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{dfd}/{name}", dfd


# -- the hook's half ---------------------------------------------------------------------------
# the flags `agentledger score` takes, before or after the command (tests/test_hook_service.py
# checks them against the parser): those that take a value, and those that do not
_VALUED = frozenset({"--config", "--db", "--iteration-log", "--repo", "--trunk", "--rubric", "--transcripts",
                     "--vally", "--annotations", "--source"})
_FLAGS = frozenset({"-q", "--quiet", "--json", "--in-process"})


def quick(argv: list[str]) -> tuple[int, str, str] | None:
    """The service's answer to ``agentledger ARGV``, asked before the command line is
    parsed or the configuration loaded (the launcher's first step), or None: not a
    ``score`` command line read here with certainty, no service, or a refusal. The
    service resolves the command line itself; this only finds its socket."""
    store = store_of(argv, os.environ)
    return None if store is None else ask(store, argv)


def store_of(argv: list[str], env) -> str | None:
    """The ledger a ``score`` command line names (flag, environment, configuration file,
    default: ``config.py``'s order), or None when the command line holds anything this
    reading is not sure of (the full parser then decides). A wrong guess costs a refusal."""
    opts: dict[str, str] = {}
    command, positional, i = None, 0, 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.partition("=")
        if a == "--in-process":
            return None  # the hook works itself: no service to look for
        if a in _FLAGS:
            i += 1
            continue
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                value = argv[i + 1]
                i += 1
            opts[name] = value
        elif a.startswith("-"):
            return None  # --help, an abbreviation, a negative number, …: the parser's to say
        elif command is None:
            if a != "score":
                return None
            command = a
        else:
            positional += 1
        i += 1
    if command is None or positional != 1:
        return None
    if opts.get("--db"):
        return os.path.expanduser(opts["--db"])
    if env.get("AGENTLEDGER_STORE_PATH"):
        return os.path.expanduser(env["AGENTLEDGER_STORE_PATH"])
    path = paths.config_file(opts.get("--config"), env)
    if path:
        import tomllib

        try:
            with open(path, "rb") as fh:
                section = tomllib.load(fh).get("store", {})
        except (OSError, ValueError):
            return None
        raw = section.get("path") if isinstance(section, dict) else None
        if raw is not None:
            if not isinstance(raw, str) or not raw:
                return None
            return os.path.join(os.path.dirname(os.path.realpath(path)), os.path.expanduser(raw))
    return paths.default_store(env)


def ask(store: str | os.PathLike, argv: list[str]) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of ``agentledger ARGV`` as the service on the ledger
    ``store`` answered it, or None: no service answers there, or it will not answer this
    command line (the caller works itself). A socket is asked once a process."""
    from .. import __version__

    path = socket_path(store)
    if path in _asked:
        return None
    _asked.add(path)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return None  # not a service of this user's: never print what another user's process says
    dfd = s = None
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        request = encode_request(list(argv), os.getcwd(), os.environ, umask, __version__)
        address, dfd = _address(path)
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        s.settimeout(CONNECT_TIMEOUT)
        s.connect(address)
        if peer_uid(s) != os.getuid():  # the socket's file was ours, but who answers?
            return None
        s.settimeout(ANSWER_TIMEOUT)
        s.sendall(request)
        s.shutdown(_socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return decode_answer(b"".join(chunks))
    except (OSError, ValueError):  # no service, a stale socket, a service that died mid-answer
        return None
    finally:
        if s is not None:
            s.close()
        if dfd is not None:
            os.close(dfd)


def encode_request(argv: list[str], cwd: str, env, umask: int, version: str) -> bytes:
    """MAGIC, protocol, version, umask, directory, argument count, the arguments, then
    ``NAME=VALUE`` for each variable: NUL-separated (none of them can hold a NUL)."""
    fsencode = os.fsencode
    return b"\0".join([MAGIC, b"%d" % PROTOCOL, version.encode(), b"%d" % umask, fsencode(cwd), b"%d" % len(argv),
                       *map(fsencode, argv), *(fsencode(k) + b"=" + fsencode(v) for k, v in env.items())])


def decode_request(data: bytes) -> dict:
    """A request as ``encode_request`` made it; ``ValueError`` when it is not one."""
    parts = data.split(b"\0")
    if len(parts) < 6 or parts[0] != MAGIC:
        raise ValueError("not a request")
    argc = int(parts[5])
    if not 0 <= argc <= len(parts) - 6:
        raise ValueError("not a request")
    env = {}
    for item in parts[6 + argc:]:
        name, eq, value = item.partition(b"=")
        if not eq or not name:
            raise ValueError("not a request")
        env[os.fsdecode(name)] = os.fsdecode(value)
    return {"protocol": int(parts[1]), "version": parts[2].decode("ascii"), "umask": int(parts[3]),
            "cwd": os.fsdecode(parts[4]), "argv": [os.fsdecode(a) for a in parts[6:6 + argc]], "env": env}


def encode_answer(code: int, out: str, err: str) -> bytes:
    o, e = out.encode("utf-8", "surrogateescape"), err.encode("utf-8", "surrogateescape")
    return b"ok %d %d %d\n" % (code, len(o), len(e)) + o + e


def encode_refusal(why: str) -> bytes:
    return b"refused " + why.encode("ascii", "replace") + b"\n"


def decode_answer(data: bytes) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr), or None: a refusal, or not an answer at all."""
    head, _, rest = data.partition(b"\n")
    words = head.split(b" ")
    if len(words) != 4 or words[0] != b"ok":
        return None
    code, n_out, n_err = (int(w) for w in words[1:])
    if n_out < 0 or n_err < 0 or n_out + n_err != len(rest):
        return None
    return code, rest[:n_out].decode("utf-8", "surrogateescape"), rest[n_out:].decode("utf-8", "surrogateescape")


# -- the service's half ------------------------------------------------------------------------
def request_problem(request: dict) -> str | None:
    """Why a request is not one the service answers (None: it may be, once resolved)."""
    from .. import __version__

    if request["protocol"] != PROTOCOL:  # (decode_request made it: the types are right)
        return "not a request of this protocol"
    if request["version"] != __version__:
        return "another version of agentledger"
    if "score" not in request["argv"]:
        return "not a score command line"
    if not os.path.isabs(request["cwd"]):
        return "not a directory"
    if not 0 <= request["umask"] <= 0o777:
        return "not a umask"
    return None


class HookServer:
    """Listens on the socket, and starts the warm copy of the command line that answers
    (``cli/served.py``, one process for the service's life; it forks one process a
    request). Its log lines come back on a pipe and are logged here, as the service's."""

    def __init__(self, cfg, log) -> None:
        """``cfg``: the service's configuration, less ``run --rubric X`` (the service
        activated X once, at its start; a hook asks for a rubric itself)."""
        from dataclasses import replace

        self.cfg = cfg = replace(cfg, explicit_rubric=None)
        self.path = socket_path(cfg.store.path)
        self._log = log
        self._fingerprints = sorted(fingerprint(cfg, s) for s in cfg.iteration_logs)
        self._proc = None  # the warm copy (a subprocess.Popen)
        self._relay = None  # the thread that logs what it says
        self._stopping = False

    def start(self) -> HookServer:
        """Listen (the caller holds the ledger's run lock, so a socket left at the path is
        a dead service's, and is replaced) and start the warm copy. A socket or process
        that cannot be made is one line in the log: the hook then works in its own
        process, as without a service."""
        import json
        import socket
        import subprocess
        import sys
        import threading

        old = os.umask(0o177)  # 0600 from the start: no moment when others could connect
        dfd = sock = None
        try:
            self._unlink()
            address, dfd = _address(self.path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            sock.bind(address)
            sock.listen(16)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, str(os.getpid()), str(sock.fileno())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(sock.fileno(),))
            with self._proc.stdin:  # what it answers for; nothing else is shared
                self._proc.stdin.write(json.dumps({"fingerprints": self._fingerprints}).encode() + b"\n")
        except OSError as exc:
            self._log.warning(f"the close-task hook will work in its own process: cannot listen on {self.path}: {exc}")
            self._unlink()
            return self
        finally:
            os.umask(old)
            if dfd is not None:
                os.close(dfd)
            if sock is not None:
                sock.close()  # the warm copy holds the listening socket now
        self._relay = threading.Thread(target=self._relay_log, name="agentledger-hook", daemon=True)
        self._relay.start()
        return self

    def _relay_log(self) -> None:
        import json

        proc = self._proc
        for line in proc.stdout:  # type: ignore[union-attr]
            try:
                record = json.loads(line)
                level, event = record.pop("level"), record.pop("event")
            except (ValueError, KeyError, AttributeError):
                continue
            say = self._log.error if level == "error" else self._log.warning if level == "warning" else self._log.info
            say(str(event), **{str(k): v for k, v in record.items()})
        code = proc.wait()
        if not self._stopping:
            self._log.error("the close-task hook's server exited; the hook works in its own process", exit=code)
            self._unlink()

    def stop(self) -> None:
        import subprocess

        self._stopping = True
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._relay is not None:
            self._relay.join()
        if self._proc is not None:
            self._proc.stdout.close()  # type: ignore[union-attr]
        self._unlink()

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def peer_uid(conn) -> int:
    """The uid of the process at the other end (``SO_PEERCRED``: pid, uid, gid)."""
    return struct.unpack("3i", conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12))[1]


def read_request(conn) -> dict:
    """The request the hook sent, to the end of its half of the connection: at most
    ``MAX_REQUEST`` bytes within ``READ_TIMEOUT`` seconds in all, however it trickles in
    (``TimeoutError``; ``ValueError`` when too long or not a request)."""
    import time

    deadline = time.monotonic() + READ_TIMEOUT
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request too slow")
        conn.settimeout(left)
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REQUEST:
            raise ValueError("request too long")
    return decode_request(b"".join(chunks))


def send(conn, answer: bytes) -> None:
    """The answer, then the end of the connection (not at the process's exit, which first
    unmaps its memory: ~10 ms the hook would wait)."""
    try:
        conn.sendall(answer)
        conn.shutdown(_socket.SHUT_RDWR)
    except OSError:
        pass  # the hook gave up waiting (it works itself)
