"""Helpers shared by the benchmarks (run as ``python bench/<name>.py``, so this is importable)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


_SPAWNER = r"""
import ctypes, json, os, sys, time
# a subreaper: what a command leaves running when it exits (its worker pool's forkserver
# ends just after it) becomes this process's child, is waited for here, and its CPU counted
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER): a command's CPU would be undercounted")
for line in sys.stdin:
    cmd, env, err = json.loads(line)
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            os.execvpe(cmd[0], cmd, env)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    cpu = usage.ru_utime + usage.ru_stime  # the command's and every descendant it waited for
    while True:  # and those it left behind, once they end
        try:
            _, _, left = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += left.ru_utime + left.ru_stime
    print(json.dumps([wall, os.waitstatus_to_exitcode(status), usage.ru_maxrss, cpu]), flush=True)
"""


class Spawner:
    """Runs commands from a small process of its own, so that a command's peak RSS is its
    own: the peak ``wait4`` reports includes the resident set of the process that forked
    it (Linux carries the mark across exec), and a benchmark that holds a generated log of
    300,000 iterations would lend its ~300 MB to every command it times. Each command's
    stdout is discarded and its stderr kept (``run`` returns it on failure)."""

    def __init__(self) -> None:
        self._err = tempfile.NamedTemporaryFile(prefix="agentledger-bench-", suffix=".stderr", delete=False)
        self._err.close()
        # a session of its own: ``close(stop=True)`` ends it with the command it runs
        self._proc = subprocess.Popen([sys.executable, "-c", _SPAWNER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, cmd: list[str], env: dict | None = None) -> tuple[float, int, int, str, float]:
        """(wall seconds, exit status, peak RSS KiB, stderr, CPU seconds) of one command;
        its CPU is user and system time of all its processes (worker pools, git), those
        that outlive it included: what the cores had to give it."""
        self._proc.stdin.write(json.dumps([cmd, {**os.environ, **(env or {})}, self._err.name]) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:  # the spawner failed (it says why on this process's stderr)
            raise SystemExit(f"the benchmark's spawner ended (exit status {self._proc.wait()})")
        seconds, status, peak, cpu = json.loads(line)
        return seconds, status, peak, Path(self._err.name).read_text(errors="replace"), cpu

    def close(self, *, stop: bool = False) -> None:
        """Wait for the spawner to end; ``stop``: end it now, with the command it runs (the
        benchmark was stopped: the trees it removes next must not be written to again)."""
        stopped = stop and self._proc.poll() is None
        if stopped:
            os.killpg(self._proc.pid, signal.SIGTERM)
        self._proc.stdin.close()
        self._proc.wait()
        Path(self._err.name).unlink(missing_ok=True)
        if stopped:  # the command's worker pool went with it, its directory left for the next run
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.killpg(self._proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            from agentledger.process import lifetime, parallel

            lifetime.remove_stale(tempfile.gettempdir(), parallel.POOL_DIR_PREFIX)  # as that next run would


def run(cmd: list[str], *, rss_samples: list | None = None, every: float = 0.25,
        env: dict | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process; the peak includes this
    process's own resident set when it was forked (see ``Spawner``), so the callers
    fork from a process that holds little. With ``rss_samples``, also appends (seconds
    since start, RSS MiB) to it every ``every`` seconds while the child runs."""
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.execvpe(cmd[0], cmd, {**os.environ, **(env or {})})
    while True:
        done, status, usage = os.wait4(pid, 0 if rss_samples is None else os.WNOHANG)
        if done:
            break
        if rss := rss_mb(pid):
            rss_samples.append((time.perf_counter() - t, rss))
        time.sleep(every)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t, usage.ru_maxrss


def rss_mb(pid: int) -> float:
    """A running process's resident set now, in MiB (0 once it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100), interpolated as the report's charts do."""
    from agentledger.views.stats import quantile

    return quantile(sorted(values), p / 100)


_PACE = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(3_000_000):\n    x += i * i\nprint(time.perf_counter() - t)"


def pace() -> str:
    """How fast this machine runs Python now: a fixed loop (``x += i * i`` three million
    times) timed in a fresh interpreter. This VM's speed wanders over a day (the loop has
    taken 0.26–0.54 s) and every figure moves with it; a benchmark prints this at its start
    and, from an exit handler, at its end, so that its figures say which stretch they were
    taken in."""
    out = subprocess.run([sys.executable, "-c", _PACE], capture_output=True, text=True, check=True)
    return f"machine pace: the fixed loop took {float(out.stdout):.2f} s"


def preamble() -> str:
    """What a benchmark prints first: bytecode compiled (``compile_bytecode``) and the
    machine's pace, whose reading at the end is printed when the benchmark exits."""
    import atexit

    atexit.register(lambda: print(f"{pace()} (at the end)", flush=True))
    return f"{compile_bytecode()}\n{pace()} (at the start)"


def compile_bytecode() -> str:
    """Compile agentledger's modules to bytecode before timing anything, and say so.

    An installed package carries its ``.pyc`` files (pip compiles them); a checkout run
    with ``PYTHONDONTWRITEBYTECODE=1`` (set on this workplace's machines) would compile
    every module from source at every start, which adds ~80 ms to each command and is
    not what users run. Python reads existing bytecode whatever that variable says."""
    import compileall
    import agentledger

    root = Path(agentledger.__file__).parent
    compileall.compile_dir(root, quiet=1)
    return f"bytecode: compiled ({root})"
