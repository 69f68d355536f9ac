"""The warm copy of the command line that answers the close-task hook for the service.

``agentledger run`` starts it once (``service/hook.py``'s ``HookServer``): ``python -m
agentledger.cli.served PARENT FD``, the listening socket as descriptor FD and, on stdin,
the fingerprints of what the service answers for. It imports the command line and what
``score`` uses, and then, for each connection of its own user, forks: the child takes
the hook's directory, environment and umask, runs the hook's own command line through
``cli.main`` with its output kept, and sends back the exit code and the output, or a
refusal (``cmd_score`` raises ``NotServed`` for what the service does not serve; a usage
error is the hook's to print). The hook's process thus pays for starting Python and a
socket round trip, not for importing the ledger (~90 ms). Each child is its own process,
single-threaded, forked from a process that never opened the ledger: nothing it does is
shared with the next request or with the service.

It ends when the service ends (SIGTERM, or the service's exit seen through a pidfd),
and each child ends with it (``lifetime.exit_with_parent``: a pidfd of its own). Log lines go to the service as JSON
lines on stdout; nothing else reaches that pipe.
"""

from __future__ import annotations

import gc
import io
import json
import os
import select
import signal
import socket
import sys


def serve() -> None:
    from ..service import hook

    parent, fd = int(sys.argv[1]), int(sys.argv[2])
    served = frozenset(json.loads(sys.stdin.readline())["fingerprints"])
    log_fd = os.dup(1)  # the pipe to the service; fd 0 and 1 go nowhere (a git child's output, say)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    _warm()
    listener = socket.socket(fileno=fd)
    listener.setblocking(False)
    try:
        watch = os.pidfd_open(parent)
    except (AttributeError, OSError):
        watch = None
    children: set[int] = set()
    stop = []
    wake, woken = os.pipe()  # a signal wakes the select below at once (it would go on waiting)
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    gc.freeze()  # what was imported stays shared with the children, untouched by their collections
    while not stop:
        ready = select.select([listener, wake] + ([watch] if watch is not None else []), [], [], 1.0)[0]
        _reap(children)
        if stop or watch is not None and watch in ready or watch is None and os.getppid() != parent:
            break  # stopped, or the service is gone
        if listener not in ready:
            continue
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            break
        uid = hook.peer_uid(conn)
        if uid != os.getuid():
            _say(log_fd, "warning", "close-task hook request refused: another user", peer_uid=uid)
            conn.close()
            continue
        if len(children) >= hook.MAX_ANSWERING:  # a flood of connections: each hook past these works itself
            _say(log_fd, "warning", "close-task hook request not answered: too many at once", answering=len(children))
            conn.close()
            continue
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                for fd in (wake, woken):
                    os.close(fd)
                listener.close()
                _answer(conn, served, log_fd, me)
                code = 0
            finally:
                os._exit(code)
        children.add(pid)
        conn.close()
    for pid in children:  # a hook whose answer was cut short works itself
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _warm() -> None:
    """Import what answering ``score`` imports, once, here rather than in each child."""
    import sqlite3  # noqa: F401

    from .. import ledger  # noqa: F401
    from ..analysis import changepoint  # noqa: F401 - the detectors, fed after each score
    from ..ledger import commit, facade, gathered, iterlogs, score_job, scoring_pass, sidecar_sync  # noqa: F401
    from ..output import sidecars  # noqa: F401
    from ..scoring import combine  # noqa: F401
    from ..sources.iterlogs import records, sidefiles  # noqa: F401
    from ..store import projections  # noqa: F401
    from .. import model
    from ..scoring import rubric
    from ..store.migrate import migration_files
    from . import build_parser

    build_parser()  # every command's module: a command line that does not start with `score`
    build_parser("ingest", "score")  # (kept: build_parser remembers what it built)
    model.warm()
    for version in rubric.available():
        rubric.load(version)
    migration_files()


def _reap(children: set[int]) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def _say(log_fd: int, level: str, event: str, **fields) -> None:
    try:
        os.write(log_fd, json.dumps({"level": level, "event": event, **fields}).encode() + b"\n")
    except OSError:
        pass


def _answer(conn: socket.socket, served: frozenset[str], log_fd: int, parent: int) -> None:
    """In the child: read one request, run it as the hook would, send what it printed."""
    from ..process import lifetime
    from ..service import hook
    from . import main

    lifetime.exit_with_parent(parent)  # a pidfd watched by a thread: no ctypes (MemoryDenyWriteExecute)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    conn.setblocking(True)
    try:
        request = hook.read_request(conn)
    except (OSError, ValueError):
        return  # too long, too slow, not a request, or gone: no answer
    conn.settimeout(None)

    def refuse(why: str, level: str = "info", **fields) -> None:
        _say(log_fd, level, f"close-task hook request refused: {why}", **fields)
        hook.send(conn, hook.encode_refusal(why))

    problem = hook.request_problem(request)
    if problem:
        return refuse(problem)
    try:
        os.chdir(request["cwd"])
    except OSError:
        return refuse("its directory cannot be entered here")
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(request["umask"])
    hook.SERVING = served
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    try:
        code = main(request["argv"])
    except hook.NotServed:
        return refuse("not a source of this service under its settings")
    except SystemExit:  # a usage error: the hook prints its own
        return refuse("not a command line it answers")
    except BaseException as exc:  # noqa: BLE001 - the hook then works itself and says what went wrong
        from ..redact import scrub

        return refuse("failed", "error", error=scrub(f"{type(exc).__name__}: {exc}"))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    hook.send(conn, hook.encode_answer(code, out.getvalue(), err.getvalue()))
    _say(log_fd, "info", "close-task hook answered", exit=code)


if __name__ == "__main__":
    serve()
