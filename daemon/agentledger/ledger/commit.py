"""The ledger's side of the one write path (``store/log.py``): a batch whose changes
are noted for the planner once it has committed, and what it appended counted into
the step's report, quarantines logged.

Whole files (iteration logs, annotations) and tailed lines (vally, transcripts)
differ only in the checkpoint they hand the store: a file's stat and content hash,
or a byte offset with its line count and fingerprint.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterator

from ..store.events import Event
from ..store.log import Batch, Checkpoint, FileCheckpoint
from .context import Context
from .outcome import Outcome

log = logging.getLogger("agentledger")


@contextlib.contextmanager
def transaction(ctx: Context) -> Iterator[Batch]:
    """One batch of the event log; what it touched is noted for the planner once it
    has committed."""
    with ctx.log.batch() as batch:
        yield batch
    ctx.touched.merge(batch.touched)


def place(conn: sqlite3.Connection, changes: list[tuple[str, list[Event], bool, int | None]]) -> None:
    """Whole files' changes, each (its stream, its events, whether the file has a
    checkpoint, that checkpoint's last seq), each event's key made to end with where the
    file's history stood: the checkpoint's last seq, read with the content hash the change
    is observed against, or, for a file put back (no checkpoint, its stream's last event a
    ``file.removed``), that removal's seq (one query for the batch; a cold ingest's finds
    no event). A change is named by its file and its content before and after; without
    its place, the same change made again later (a record removed and put back, an edit
    undone and made again) would have the first one's key, and the ledger would take it
    for that one sent twice and drop it. Two writers that observed the same change against
    the same checkpoint still give it one key."""
    back: dict[str, int] = {}
    if streams := [stream for stream, events, known, _ in changes if events and not known]:
        back = {stream: seq for stream, seq, type_ in conn.execute(
            "SELECT stream, max(seq), type FROM events WHERE stream IN (SELECT value FROM json_each(?))"
            " GROUP BY stream", (json.dumps(streams),)) if type_ == "file.removed"}  # (type: the max row's)
    for stream, events, known, last in changes:
        at = last if known else back.get(stream)
        if at is not None:
            for ev in events:
                ev.idempotency_key += f"|after:{at}"


def record(batch: Batch, events: list[Event], report: Outcome, where: object, *,
           checkpoint: Checkpoint | None = None) -> list[Event]:
    """``batch.append`` counted into ``report``, each quarantine logged; the new events."""
    new = batch.append(events, checkpoint=checkpoint)
    _count(new, report, where)
    return new


def record_files(batch: Batch, files: list[tuple[list[Event], FileCheckpoint, object]], report: Outcome) -> None:
    """``record`` for whole files, (events, checkpoint, where) each, appended together
    (``Batch.append_files``)."""
    for new, (_, _, where) in zip(batch.append_files([(evs, cp) for evs, cp, _ in files]), files):
        _count(new, report, where)


def _count(new: list[Event], report: Outcome, where: object) -> None:
    report.events += len(new)
    for ev in new:
        if ev.type == "source.quarantined":
            report.quarantined += 1
            log.warning("quarantined %s: %s", where, ev.payload["reason"])
