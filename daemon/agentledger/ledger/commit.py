"""The one ingest step every source kind shares: append a batch's events, project
them, and save what the source has read, in one transaction.

Whole files (iteration logs, annotations) and tailed lines (vally, transcripts)
differ only in what they checkpoint: a file's stat and content hash, or a byte
offset with its line count and fingerprint. Either way a crash leaves all of a
batch or none of it, and idempotency keys drop what a retried batch appends again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from ..store import db as store
from ..store.events import Event, append_many
from ..store.projections import Projector
from .context import Context
from .report import Report

log = logging.getLogger("agentledger")


@contextlib.contextmanager
def transaction(ctx: Context) -> Iterator[Projector]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` with a projector; what the batch touched is
    noted for the planner once it has committed."""
    with store.write_transaction(ctx.conn):
        projector = Projector(ctx.conn)
        yield projector
        projector.flush()
    ctx.touched.merge(projector.queued)


def record(ctx: Context, events: list[Event], projector: Projector, report: Report, where: object) -> int | None:
    """Append ``events`` (inside the caller's transaction), project the new ones,
    count them and log quarantines; the ``seq`` of the last new event, if any."""
    last = None
    for ev in append_many(ctx.conn, events):
        projector.apply(ev)
        last = ev.seq
        report.events += 1
        if ev.type == "source.quarantined":
            report.quarantined += 1
            log.warning("quarantined %s: %s", where, ev.payload["reason"])
    return last


def file_checkpoint(ctx: Context, source: str, rel: str, kind: str, stat_: tuple | None,
                    content_hash: str | None, last_seq: int | None) -> None:
    """What a whole-file source last saw of ``rel``; ``content_hash`` None: it is gone."""
    if content_hash is None:
        ctx.conn.execute("DELETE FROM source_checkpoints WHERE source = ? AND path = ?", (source, rel))
        return
    dev, ino, size, mtime = stat_ or (None, None, None, None)
    ctx.conn.execute(
        "INSERT INTO source_checkpoints (source, path, kind, dev, ino, size, mtime_ns, content_hash, last_seq)"
        " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (source, path) DO UPDATE SET kind = excluded.kind,"
        " dev = excluded.dev, ino = excluded.ino, size = excluded.size, mtime_ns = excluded.mtime_ns,"
        " content_hash = excluded.content_hash, last_seq = coalesce(excluded.last_seq, last_seq)",
        (source, rel, kind, dev, ino, size, mtime, content_hash, last_seq))


def tail_checkpoint(ctx: Context, source: str, rel: str, mode: str, batch, last_seq: int | None) -> None:
    """Where the next read of a tailed file starts (``batch.end``), with the file's stat."""
    dev, ino, size, mtime = batch.stat or (None, None, None, None)
    end = batch.end
    ctx.conn.execute(
        "INSERT INTO source_checkpoints (source, path, kind, dev, ino, size, mtime_ns, byte_offset,"
        " line_no, fingerprint, open_line, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (source, path) DO UPDATE SET kind = excluded.kind, dev = excluded.dev, ino = excluded.ino,"
        " size = excluded.size, mtime_ns = excluded.mtime_ns, byte_offset = excluded.byte_offset,"
        " line_no = excluded.line_no, fingerprint = excluded.fingerprint, open_line = excluded.open_line,"
        " last_seq = coalesce(excluded.last_seq, last_seq)",
        (source, rel, mode, dev, ino, size, mtime, end.offset, end.line_no, end.fingerprint, end.open, last_seq))
