"""Spread a pure, CPU-bound map over the machine's cores, for bulk work only.

Parsing thousands of files and scoring thousands of iterations are
embarrassingly parallel and pure; the ledger (SQLite) and git stay in the
calling process. Small jobs (the close-task hook scores one iteration) run
in-process: starting workers costs more than it saves below ``threshold``.
Workers come from a *forkserver*, so they never inherit the caller's open
SQLite connection.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

THRESHOLD = 2000
_pool = None
_disabled = False


def workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, int(os.environ.get("AGENTLEDGER_WORKERS", n))))


def pmap(fn: Callable[[T], R], items: list[T], *, threshold: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` in order; in worker processes when ``items`` is large.

    The pool is only an optimisation: if workers cannot start or die (e.g. the
    host program's ``__main__`` cannot be re-imported by them), the work is
    done in this process instead, and the pool is not tried again."""
    global _pool, _disabled
    n = workers()
    if _disabled or n < 2 or len(items) < (THRESHOLD if threshold is None else threshold):
        return map(fn, items)
    from concurrent.futures.process import BrokenProcessPool

    try:
        if _pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            _pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("forkserver"))
        chunk = max(64, len(items) // (n * 8))
        return iter(list(_pool.map(fn, items, chunksize=chunk)))
    except (BrokenProcessPool, OSError) as exc:
        import logging

        logging.getLogger("agentledger").warning("worker processes unavailable (%s); working in-process", exc)
        _disabled = True
        shutdown()
        return map(fn, items)


def shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(cancel_futures=True)
        _pool = None
