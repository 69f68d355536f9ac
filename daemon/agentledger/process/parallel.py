"""Spread a pure, CPU-bound map over the machine's cores, for bulk work only.

Parsing thousands of files and scoring thousands of iterations are
embarrassingly parallel and pure; the ledger (SQLite) and git stay in the
calling process. Small jobs (the close-task hook scores one iteration) run
in-process: starting workers costs more than it saves below ``threshold``.
Workers come from a *forkserver*, so they never inherit the caller's open
SQLite connection. They end when the process that started them ends, however
it ends (``lifetime.exit_with_parent``), and the pool's temp directory (the
forkserver's socket) is named after that process, so a killed run's is removed
by its workers, by its forkserver (``forkserver_exit``) or by the next run that
starts a pool.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

THRESHOLD = 2000
WARM_THRESHOLD = 64  # when the pool is already up (a daemon after its first scan): ~10 % off
                     # a transcript line that rescores 180 iterations
_pool = None
_disabled = False
_prestarted = False  # a start was begun on a thread (``prestart``)
_starting = threading.Lock()
POOL_DIR_PREFIX = "agentledger-pool-"


def workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, int(os.environ.get("AGENTLEDGER_WORKERS", n))))


def min_items() -> int:
    """The smallest batch that starts the pool (``AGENTLEDGER_PARALLEL_MIN_ITEMS``)."""
    return int(os.environ.get("AGENTLEDGER_PARALLEL_MIN_ITEMS", THRESHOLD))


def executor():
    """The shared worker pool, or None when work should stay in this process. Started
    under a lock: the service's main loop and the thread answering the close-task hook
    may both want it first (submitting to one pool from two threads is safe)."""
    global _disabled
    if _disabled or workers() < 2:
        return None
    try:
        return _started()
    except OSError:
        _disabled = True
        return None


def _started(module: str = __name__):
    """The pool, started now if it is not yet, its workers forked at once (a job each,
    ``_warm``: each imports ``module``); a start under way on another thread
    (``prestart``) finishes first. Raises what starting it raises."""
    global _pool
    with _starting:
        if _pool is None:
            pool = _start_pool(workers())
            for _ in range(workers()):  # one job each: a new pool starts a worker a job until it has n
                pool.submit(_warm, module)
            _pool = pool
        return _pool


def pool_for(size: int):
    """The worker pool when ``size`` items are worth it (what ``pmap`` decides: the
    pool is started for a large batch, used for a medium one once running), else None."""
    threshold = min_items() if _pool is None else WARM_THRESHOLD
    return executor() if size >= threshold else None


def prestart(size: int) -> bool:
    """Start the pool for ``size`` items of bulk work to come, on a thread, while the
    caller prepares that work: the forkserver's start, its imports (``PRELOAD``) and the
    workers' forks take ~0.12 s, off a switch back's main thread. Nothing when ``size`` is
    below what starts the pool; ``executor`` waits for a start under way. Whether it
    began a start."""
    global _prestarted
    if _pool is not None or _disabled or workers() < 2 or size < min_items():
        return False
    _prestarted = True
    threading.Thread(target=executor, name="agentledger-pool-start").start()
    return True


def _pool_dir() -> str:
    """This process's directory for multiprocessing's files (the forkserver's socket),
    instead of an anonymous ``pymp-*`` that a killed process leaves in /tmp forever."""
    import atexit
    import multiprocessing.process
    import shutil
    import tempfile

    from . import lifetime

    config = multiprocessing.process.current_process()._config
    tmp = config.get("tempdir")
    if tmp is None or not os.path.basename(tmp).startswith(POOL_DIR_PREFIX):
        base = tempfile.gettempdir()
        lifetime.remove_stale(base, POOL_DIR_PREFIX)  # those of runs that were killed
        tmp = tempfile.mkdtemp(prefix=lifetime.stamped(POOL_DIR_PREFIX), dir=base)
        config["tempdir"] = tmp
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    return tmp


# Modules the worker processes' jobs live in (``preload``): the forkserver imports them
# once, before it forks the workers, instead of each worker importing them (~90 ms of CPU
# a worker, spent while the caller is busy too).
PRELOAD: list[str] = []


def preload(*modules: str) -> None:
    """Name modules whose jobs the pool will run (the forkserver imports them first)."""
    PRELOAD.extend(m for m in modules if m not in PRELOAD)


def _start_pool(n: int):
    """The executor, its forkserver already started: the forkserver removes the pool's
    directory when it ends (``forkserver_exit``), so a run killed from here on leaves
    none. One killed in the few milliseconds between making the directory and starting
    the forkserver leaves an empty one, which the next run that starts a pool removes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # before the directory: not part of that window
    tmp = _pool_dir()
    context = multiprocessing.get_context("forkserver")
    # "__main__": multiprocessing's default; forkserver_exit first, before any slow import
    context.set_forkserver_preload(["__main__", f"{__package__}.forkserver_exit", *PRELOAD])
    forkserver.ensure_running()
    return ProcessPoolExecutor(max_workers=n, mp_context=context, initializer=_worker_start,
                               initargs=(os.getpid(), tmp))


def _worker_start(parent: int, leftovers: str) -> None:  # in each worker, once, before its first job
    from . import collector, lifetime

    collector.pace()
    lifetime.exit_with_parent(parent, leftovers)


def imap_bounded(fn: Callable[[T], R], items: Iterator[T], *, in_flight: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` in order, on the pool, with at most ``in_flight`` jobs queued or
    running, so results are consumed (committed) while later ones are computed and
    memory stays bounded. Falls back to this process when the pool is unavailable."""
    from collections import deque
    from concurrent.futures.process import BrokenProcessPool

    pool = executor()
    if pool is None:
        yield from map(fn, items)
        return
    limit = in_flight or workers() + 1
    queue: deque = deque()
    items = iter(items)
    pending = None  # an item taken from ``items`` and not yet in the queue
    try:
        for item in items:
            pending = item
            queue.append((item, pool.submit(fn, item)))
            pending = None
            while len(queue) >= limit:
                result = queue[0][1].result()  # leaves the queue only once it has a result
                queue.popleft()
                yield result
        while queue:
            result = queue[0][1].result()
            queue.popleft()
            yield result
    except BrokenProcessPool as exc:
        import logging

        global _disabled
        logging.getLogger("agentledger").warning("worker processes unavailable (%s); working in-process", exc)
        _disabled = True
        shutdown()
        for item, _ in queue:  # what had not been consumed yet, then the rest, here: none is lost
            yield fn(item)
        if pending is not None:
            yield fn(pending)
        yield from map(fn, items)


MAX_CHUNK = 512  # items a worker gets at a time in a pmap


def pmap(fn: Callable[[T], R], items: list[T] | Iterator[T], *, threshold: int | None = None,
         total: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` in order; in worker processes when ``items`` is large.

    ``items`` may be a lazy iterator of ``total`` items: it is drawn from only as workers
    take chunks, so the work that makes the next items (a scoring pass gathering its next
    part) runs while the workers compute the chunks in flight.

    The pool is only an optimisation: if workers cannot start or die (e.g. the
    host program's ``__main__`` cannot be re-imported by them), the work is
    done in this process instead, and the pool is not tried again."""
    global _disabled
    size = len(items) if total is None else total  # type: ignore[arg-type]
    if not _spreads(size, threshold):
        return map(fn, items)
    from concurrent.futures.process import BrokenProcessPool

    chunk, n = _chunk(size), workers()
    it = iter(items)
    if _pool is None and _prestarted:  # a start under way on its thread: the first chunk is made
        # meanwhile (a pass gathering its first part: ~0.25 s of a backfill of 10,000)
        it = itertools.chain(list(itertools.islice(it, chunk)), it)
    try:
        _started(fn.__module__)  # its workers import the jobs' module while the caller makes the first chunk
        parts = ((fn, part) for part in iter(lambda: list(itertools.islice(it, chunk)), []))
        # a few chunks in flight, not all of them: results are consumed (committed) while
        # later ones are computed, and memory holds a few chunks, not the whole pass
        return (r for part in imap_bounded(_apply, parts, in_flight=2 * n + 1) for r in part)
    except (BrokenProcessPool, OSError) as exc:
        import logging

        logging.getLogger("agentledger").warning("worker processes unavailable (%s); working in-process", exc)
        _disabled = True
        shutdown()
        return map(fn, it)


def _spreads(size: int, threshold: int | None = None) -> bool:
    """Whether a ``pmap`` of ``size`` items goes to the workers."""
    if threshold is None:  # starting workers costs ~0.5 s; once running, a medium batch pays
        threshold = min_items() if _pool is None else WARM_THRESHOLD
    return not _disabled and workers() >= 2 and size >= threshold


def chunk_size(size: int) -> int:
    """Items a worker takes at a time in a ``pmap`` of ``size`` items: a few chunks a
    worker, so that they finish together, and none larger than ``MAX_CHUNK`` (1 when
    they are mapped in this process)."""
    return _chunk(size) if _spreads(size) else 1


def _chunk(size: int) -> int:
    return min(max(64, size // (workers() * 8)), MAX_CHUNK)


def _warm(module: str) -> None:  # in a worker, once: what the jobs to come will import
    import importlib

    importlib.import_module(module)


def _apply(job: tuple) -> list:  # in a worker: one chunk of a pmap
    fn, part = job
    return [fn(x) for x in part]


def shutdown() -> None:
    global _pool, _prestarted
    with _starting:  # a start under way (``prestart``) finishes first
        pool, _pool, _prestarted = _pool, None, False
    if pool is not None:
        pool.shutdown(cancel_futures=True)
