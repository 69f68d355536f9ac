"""Helpers shared by the benchmarks (run as ``python bench/<name>.py``, so this is importable)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def run(cmd: list[str], *, rss_samples: list | None = None, every: float = 0.25,
        env: dict | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process (``wait4`` reports the child's
    own). With ``rss_samples``, also appends (seconds since start, RSS MiB) to it every
    ``every`` seconds while the child runs."""
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
