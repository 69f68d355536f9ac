"""One daemon per ledger: the run lock, held on the ledger file itself."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import AgentledgerError
from ..userfiles import read_bytes


class AlreadyRunning(AgentledgerError):
    """Another ``agentledger run`` holds this ledger."""


def hold_run_lock(store: Path) -> int:
    """One daemon per ledger: an exclusive ``flock`` on the ledger file itself, held for
    the process's life (the kernel drops it however the process ends, SIGKILL included,
    so a crash never leaves a stale lock). A lock on the file, not on a name: a symbolic
    link or a hard link to the ledger (a hard link would give one database two WAL
    files), or another spelling of its path, meets the same lock. (``flock`` locks and
    SQLite's own POSIX locks do not meet; the descriptor is closed only after the
    ledger's connections, since closing any descriptor of a file drops this process's
    POSIX locks on it.) The holder's pid is written beside the resolved path
    (``<ledger>.run.lock``), for the refusal to name it. Returns the descriptor."""
    import fcntl
    import stat

    fd = os.open(store, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AgentledgerError(f"{store}: the ledger is not a regular file; refused")
    pidfile = Path(f"{os.path.realpath(store)}.run.lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:  # (a name beside the ledger: read as a user's file is, no FIFO waited on, 64 bytes at most)
            holder = read_bytes(pidfile, "run lock", 64).decode("ascii", "replace").strip() or "?"
        except (OSError, AgentledgerError):
            holder = "?"
        os.close(fd)
        raise AlreadyRunning(f"another agentledger run (pid {holder}) is running on {store}: one daemon per ledger;"
                             " stop that one first (systemctl stop agentledger, or kill it)") from None
    try:  # never through a link planted at that name, never blocked by a FIFO there
        pid = os.open(pidfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                      0o644)
        try:
            os.write(pid, f"{os.getpid()}\n".encode())
        finally:
            os.close(pid)
    except OSError:
        pass  # the refusal of a second daemon then names no pid
    return fd


def same_ledger(a: Path, b: Path) -> bool:
    """Whether two spellings of ``[store] path`` (a symlink, ``..``, another relative
    path) name one ledger: compared as files, not strings, so that a reload onto the
    running ledger never waits for its own run lock."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: a new ledger elsewhere
        return a.resolve() == b.resolve()
