"""A user's command, run once with a document on its standard input: the
``[detect] command`` hook.

The command line is split like a shell's (``shlex``) but never run by a shell, so
nothing in the document or the ledger can become part of a command. It runs in a
session of its own; at the timeout the whole process group is killed (a shell script
that started ``sleep`` leaves nothing behind), and the command's output is not read:
what it prints goes to /dev/null, never into our log (it could hold anything).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess


def run_with_input(command: str, data: bytes, timeout: float) -> str | None:
    """Run ``command`` with ``data`` on stdin; None when it exited 0, else what went
    wrong, in one line (its exit status, a timeout, or why it could not start)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return f"cannot split the command line: {exc}"
    if not argv:
        return None
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        return f"cannot start {argv[0]!r}: {exc.strerror or exc}"
    try:
        try:
            proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"{argv[0]!r} did not finish within {timeout:g} s; stopped"
        except BrokenPipeError:  # it exited without reading all of it: its status says how it went
            proc.wait(timeout=timeout)
        return None if proc.returncode == 0 else f"{argv[0]!r} exited with status {proc.returncode}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it started goes with it
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
