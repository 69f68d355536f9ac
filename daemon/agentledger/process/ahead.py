"""Batches made on a thread, one ahead of the caller that consumes them.

A scoring pass in parts gathers each part's inputs (SQLite and git: most of it outside
the GIL) and then commits the scores the workers send back (SQLite again). Both were
done by one thread, one after the other, so the workers waited while the next part was
gathered. Here the next part is made on a thread while this one is consumed; the two
share the interpreter's lock only for their Python parts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


def made_ahead(batches: Iterable[list[T]], *, name: str) -> Iterator[T]:
    """The items of ``batches``, in order, the batches made on one thread of their own,
    each while the one before is consumed (at most one waits made). What making one raises is raised
    here, where it would have been. The thread ends with the consumer however it ends:
    a consumer that stops early (an error, a stop asked for) has the thread stop before
    its next batch and waits for it, so nothing it started outlives the pass."""
    made: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                made.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for batch in batches:
                if stop.is_set() or not put(batch):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put(exc)
            return
        put(_DONE)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = made.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # a generator's ``finally`` runs now, on this thread, once its own has ended
