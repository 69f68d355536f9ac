"""The close-task hook answered by the running service.

``agentledger score N`` is run by the agent workflow after each iteration closes, and
the workflow waits for it. Run on its own, most of its time is starting Python and
importing the ledger (~90 ms of ~140 ms); the service has all of that loaded already.
So when a service runs on the same ledger, the hook hands it the request over a unix
socket beside the ledger (``<ledger>.hook.sock``) and prints its answer: the same
bytes, exit code and side effects as doing the work itself. When no service answers,
or it refuses, the hook does the work itself, as before.

What the socket trusts, and why it is safe to offer:

* Only this user, both ways. The socket is made with mode 0600, and each connection's
  peer credentials (``SO_PEERCRED``) must carry the service's own uid, so another user
  (root included) who reaches it anyway is refused; and the hook talks only to a socket
  file of its own user whose listener runs as that user, so what another user's process
  says is never printed as a score.
* Only what the service would do anyway. A request names one iteration number of
  an iteration log the service already watches, under the same settings: the client
  sends its source and every setting that changes a score or a sidecar
  (``fingerprint``), and the service answers only for a source where all of it is equal.
  Anything else (another source, another rubric flag, another version of agentledger)
  is refused and the hook works in its own process. Nothing else can be asked.
* Bounded. A request is one line of at most ``MAX_REQUEST`` bytes read within
  ``READ_TIMEOUT`` seconds; anything else is dropped without an answer.

This module imports only the standard library at the top: the client half runs on the
hook's path. The service half takes the ledger's ``score_result`` as a function.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path

PROTOCOL = 1
MAX_REQUEST = 65536  # bytes: a request is a few numbers and the settings it was made under
READ_TIMEOUT = 5.0  # seconds a connection has to send its request
CONNECT_TIMEOUT = 1.0  # seconds the hook waits to be accepted before working itself
ANSWER_TIMEOUT = 600.0  # seconds it waits for the answer (the work may wait for the ledger's write lock)
_PATH_MAX = 100  # sun_path holds 108 bytes; a longer path is reached through its directory's descriptor


def socket_path(store: Path) -> Path:
    return Path(f"{store}.hook.sock")


def fingerprint(cfg, src) -> str:
    """What must be equal for the service's answer to be the one this process would give:
    the agentledger version, the ledger file, the iteration log (directory, repository,
    trunk, name, transcripts) and every setting a score or sidecar depends on. Sent and
    compared whole (a few hundred bytes: no digest module to import on the hook's path)."""
    from .. import __version__

    return repr((PROTOCOL, __version__, os.path.abspath(cfg.store.path), cfg.store.synchronous, src, cfg.scoring,
                 cfg.sidecars, cfg.limits, cfg.detect, cfg.explicit_rubric))


def _address(path: Path) -> tuple[str, int | None]:
    """An address ``bind``/``connect`` accept for ``path`` (and a directory descriptor to
    close after), whatever its length: a long one through ``/proc/self/fd``."""
    text = os.fsdecode(path)
    if len(os.fsencode(text)) < _PATH_MAX:
        return text, None
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{dfd}/{path.name}", dfd


# -- the hook's half ---------------------------------------------------------------------------
def ask(cfg, src, iteration: int, *, as_json: bool, quiet: bool) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) as the service answered, or None: no service answers
    for this ledger, or it will not answer this request (the caller works itself)."""
    path = socket_path(cfg.store.path)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return None  # not a service of this user's: never print what another user's process says
    request = json.dumps({"protocol": PROTOCOL, "iteration": iteration, "fingerprint": fingerprint(cfg, src),
                          "json": as_json, "quiet": quiet}).encode() + b"\n"
    dfd = None
    try:
        address, dfd = _address(path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
            s.settimeout(CONNECT_TIMEOUT)
            s.connect(address)
            if _peer_uid(s) != os.getuid():  # the socket's file was ours, but who answers?
                return None
            s.settimeout(ANSWER_TIMEOUT)
            s.sendall(request)
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        answer = json.loads(b"".join(chunks))
        if not isinstance(answer, dict) or "refused" in answer:
            return None
        code, out, err = answer["exit"], answer["stdout"], answer["stderr"]
        if not (isinstance(code, int) and isinstance(out, str) and isinstance(err, str)):
            return None
        return code, out, err
    except (OSError, ValueError, KeyError):  # no service, a stale socket, a service that died mid-answer
        return None
    finally:
        if dfd is not None:
            os.close(dfd)


# -- the service's half ------------------------------------------------------------------------
HookAnswer = Callable[[object, object, int, bool, bool], tuple[int, str, str]]


class HookServer:
    """Answers hook requests on a thread of its own, one at a time, each with a ledger of
    its own (its own SQLite connection, as a hook process would have). The service's
    main loop goes on meanwhile; the two meet, as a hook process and the service always
    did, at the ledger's write lock and the sidecar lock."""

    def __init__(self, cfg, answer: HookAnswer, log) -> None:
        """``answer(ledger, source, iteration, as_json, quiet)`` is what ``agentledger score``
        prints. ``cfg`` is the service's configuration, less ``run --rubric X`` (the service
        activated X once, at its start; a hook asks for a rubric itself)."""
        from dataclasses import replace

        self.cfg = cfg = replace(cfg, explicit_rubric=None)
        self.path = socket_path(cfg.store.path)
        self._answer, self._log = answer, log
        self._sources = {fingerprint(cfg, s): s for s in cfg.iteration_logs}
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> HookServer:
        """Listen (the caller holds the ledger's run lock, so a socket left at the path is
        a dead service's, and is replaced). A socket that cannot be made is one line in
        the log: the hook then works in its own process, as without a service."""
        old = os.umask(0o177)  # 0600 from the start: no moment when others could connect
        dfd = None
        try:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            address, dfd = _address(self.path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            sock.bind(address)
            sock.listen(16)
            sock.settimeout(0.2)  # how often the thread looks at the stop flag
        except OSError as exc:
            self._log.warning(f"the close-task hook will work in its own process: cannot listen on {self.path}: {exc}")
            return self
        finally:
            os.umask(old)
            if dfd is not None:
                os.close(dfd)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="agentledger-hook", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._sock is not None:
            self._sock.close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                self._one(conn)

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(READ_TIMEOUT)
        uid = _peer_uid(conn)
        if uid != os.getuid():
            self._log.warning("close-task hook request refused: another user", peer_uid=uid)
            return
        try:
            request = _read_line(conn)
        except (OSError, ValueError):
            return  # too long, too slow, not JSON, or gone: no answer
        src = self._sources.get(request.get("fingerprint")) if isinstance(request, dict) else None
        n = request.get("iteration") if src is not None else None
        if src is None or request.get("protocol") != PROTOCOL or type(n) is not int or not 0 <= n < 2**63:
            self._log.info("close-task hook request refused: not a source of this service under its settings")
            _send(conn, {"refused": "not a request this service answers"})
            return
        # A ledger of its own for each request, as a hook process has: nothing it holds in
        # memory (the planner's commit index, git look-ups) can be stale from the work the
        # service's main loop did meanwhile. Opening one costs ~2 ms; starting Python ~90.
        from ..ledger import Ledger

        ledger = None
        try:
            ledger = Ledger(self.cfg)
            ledger.register_sources()
            code, out, err = self._answer(ledger, src, n, bool(request.get("json")), bool(request.get("quiet")))
        except Exception as exc:  # noqa: BLE001 - the hook then works itself and says what went wrong
            self._log.error("close-task hook request failed; the hook works in its own process",
                            error=f"{type(exc).__name__}: {exc}")
            _send(conn, {"refused": "failed"})
            return
        finally:
            if ledger is not None:
                ledger.close(workers=False)  # the main loop may be using the pool
        _send(conn, {"exit": code, "stdout": out, "stderr": err})
        self._log.info("close-task hook answered", iteration=n, exit=code)


def _peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end (``SO_PEERCRED``: pid, uid, gid)."""
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]


def _read_line(conn: socket.socket) -> object:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(MAX_REQUEST + 1 - len(data))
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("request too long")
    return json.loads(data.split(b"\n", 1)[0])


def _send(conn: socket.socket, answer: dict) -> None:
    try:
        conn.sendall(json.dumps(answer).encode())
    except OSError:
        pass  # the hook gave up waiting (it works itself)
