"""Helpers shared by the benchmarks (run as ``python bench/<name>.py``, so this is importable)."""

from __future__ import annotations

import os
import time


def run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process (``wait4`` reports the child's own)."""
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.execvp(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t, usage.ru_maxrss


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100), interpolated as the report's charts do."""
    from agentledger.views.stats import quantile

    return quantile(sorted(values), p / 100)
