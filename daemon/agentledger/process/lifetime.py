"""What a process of ours leaves behind, and how it goes when its parent goes.

A process killed with SIGKILL runs no cleanup: its temp files and directories
stay, and worker processes blocked on a queue wait forever for work that will
never come. So every such leftover is named after the process that made it
(``<prefix><pid>-<random>``), any later run can tell a dead owner's leftovers
from a live writer's and remove only those, and workers watch their parent
themselves instead of trusting it to stop them.

Stdlib only: the close-task hook imports this (through ``sidecars``).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat as statmod
import threading
from pathlib import Path

# A leftover whose owner's pid cannot be read from its name (written by a version
# that did not stamp names) is removed once it is this old.
UNSTAMPED_MAX_AGE_S = 3600.0


@functools.cache
def _boot_time() -> int:
    """When the machine booted (seconds since the epoch): read once per process."""
    with open("/proc/stat", "rb") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))


def _start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), from /proc; None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of the whole line: starttime, in clock ticks after boot
        return _boot_time() + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def owner_alive(pid: int, made_at: float) -> bool:
    """Whether the process that made a file at ``made_at`` (its mtime) may still be
    writing it: ``pid`` exists and started before then (a newer process under the
    same pid is someone else: the owner is gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists; another user's
    started = _start_time(pid)
    return started is None or started <= made_at + 1.0  # +1 s: clock and tick granularity


def stamped(prefix: str) -> str:
    """The start of a leftover's name that says which process made it."""
    return f"{prefix}{os.getpid()}-"


def _stale(name: str, prefix: str, suffix: str, path: Path, now: float) -> bool:
    stem = name[len(prefix):len(name) - len(suffix)] if suffix else name[len(prefix):]
    pid_text, dash, _ = stem.partition("-")
    try:
        made_at = os.lstat(path).st_mtime
    except OSError:
        return False  # gone already
    if dash and pid_text.isdigit():
        return not owner_alive(int(pid_text), made_at)
    return now - made_at > UNSTAMPED_MAX_AGE_S


def remove_stale(directory: str | os.PathLike, prefix: str, suffix: str = "",
                 names: list[str] | None = None) -> list[Path]:
    """Remove the leftovers of dead owners in ``directory`` (names ``prefix…suffix``
    only, files or directories); returns what was removed. Never raises. ``names``:
    the directory's names (or those of them with ``prefix``) from a listing just made."""
    import time

    removed: list[Path] = []
    now = time.time()
    if names is None:
        try:
            names = os.listdir(directory)  # names only: a log directory of 20,000 files lists in half the time
        except OSError:
            return removed
    for name in names:
        if not name.startswith(prefix) or not name.endswith(suffix):
            continue
        path = Path(directory, name)
        if not _stale(name, prefix, suffix, path, now):
            continue
        try:
            if statmod.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


def exit_with_parent(parent: int, leftovers: str | None = None) -> None:
    """In a worker: end this process as soon as ``parent`` ends, whatever ended it
    (SIGKILL included), after removing ``leftovers`` (the parent's pool directory).

    Workers come from a forkserver, so the kernel's parent-death signal would name
    the forkserver, not the process that wanted the work; a pidfd names the real
    one. A thread waits on it and costs nothing until it fires."""
    try:
        fd = os.pidfd_open(parent)
    except ProcessLookupError:
        _leave(leftovers)
    except (AttributeError, OSError):  # no pidfd (an old kernel): poll instead
        fd = None

    def watch() -> None:
        import select
        import time

        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    break
                time.sleep(1.0)
        _leave(leftovers)

    threading.Thread(target=watch, name="agentledger-parent-watch", daemon=True).start()


def _leave(leftovers: str | None) -> None:
    if leftovers:
        shutil.rmtree(leftovers, ignore_errors=True)
    os._exit(1)
