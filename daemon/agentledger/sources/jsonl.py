"""Tail an append-only JSONL file from a stored position, in bounded batches.

What the caller stores per file (its checkpoint) is ``(offset, line_no,
fingerprint)``: the byte offset just past the last complete line consumed, how
many lines that was, and a hash of the file's first bytes. The caller commits
the checkpoint in the same transaction as the events made from the lines, so
a crash re-reads at most one uncommitted batch, and idempotency keys drop what
was already appended.

* A partial last line (no ``\\n`` yet) is not consumed: it waits.
* A line longer than ``max_line_bytes`` is reported (``Oversize``) and skipped
  to its newline without being held in memory.
* A file now shorter than the offset (truncated) or whose first bytes changed
  (replaced, e.g. renamed over) is read again from the start; ``reset`` says
  which. The fingerprint covers only bytes already consumed, which an
  append-only writer never changes.
* Memory is bounded by ``max_line_bytes`` plus one read buffer and a batch.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

log = logging.getLogger("agentledger")
FINGERPRINT_BYTES = 4096
CHUNK = 1 << 20


@dataclass(frozen=True)
class Position:
    offset: int = 0
    line_no: int = 0
    fingerprint: str | None = None  # "<length>:<sha256 of the first length bytes>"


class Line(NamedTuple):  # a tuple: one is made per line, and that cost shows in bulk reads
    offset: int  # byte offset of the line's first byte
    line_no: int  # 1-based
    data: bytes  # without the trailing newline


@dataclass(frozen=True)
class Oversize:
    offset: int
    line_no: int
    length: int  # bytes seen before giving up (at least max_line_bytes + 1)


@dataclass
class Batch:
    items: list[Line | Oversize] = field(default_factory=list)
    end: Position = Position()  # where the next read starts (commit this with the events)
    reset: str | None = None  # "truncated" | "replaced" when this batch restarted at 0
    size: int = 0  # file size when read (lag = size - end.offset)
    stat: tuple[int, int, int, int] | None = None  # dev, ino, size, mtime_ns


def fingerprint(fh, length: int) -> str | None:
    length = min(length, FINGERPRINT_BYTES)
    if length <= 0:
        return None
    fh.seek(0)
    head = fh.read(length)
    if len(head) < length:
        return None
    return f"{length}:{hashlib.sha256(head).hexdigest()[:32]}"


def _same_prefix(fh, fp: str | None) -> bool:
    if not fp:
        return True
    length, _, digest = fp.partition(":")
    fh.seek(0)
    head = fh.read(int(length))
    return len(head) == int(length) and hashlib.sha256(head).hexdigest()[:32] == digest


def tail(path: str | os.PathLike, pos: Position, *, max_line_bytes: int = 16 << 20,
         max_batch_bytes: int = 8 << 20, max_lines: int = 2000) -> Iterator[Batch]:
    """Batches of complete lines from ``pos`` on; stops at a partial line or end of file.

    Lines come from the buffered reader's ``readline`` with a length cap (C
    code; the per-line cost bulk catch-up is dominated by). Raises ``OSError``
    when the file cannot be opened (missing, a directory, …)."""
    with open(path, "rb", buffering=CHUNK) as fh:
        st = os.fstat(fh.fileno())
        stat = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        reset = None
        if pos.offset > st.st_size:
            reset = "truncated"
        elif not _same_prefix(fh, pos.fingerprint):
            reset = "replaced"
        if reset:
            pos = Position()
        offset, line_no = pos.offset, pos.line_no
        fh.seek(offset)
        readline, cap = fh.readline, max_line_bytes + 1
        batch = Batch(reset=reset, size=st.st_size, stat=stat)
        items, batch_bytes = batch.items, 0
        while line := readline(cap):
            if line[-1] == 10:  # b"\n"
                line_no += 1
                items.append(Line(offset, line_no, line[:-1]))
                offset += len(line)
                batch_bytes += len(line)
            elif len(line) < cap:
                break  # a partial last line waits for its newline
            else:  # over-long: skip to its newline without holding it
                length = len(line)
                while (more := readline(CHUNK)) and more[-1] != 10:
                    length += len(more)
                if not more:
                    break  # still no newline: wait, and judge it again then
                line_no += 1
                length += len(more)
                items.append(Oversize(offset, line_no, length - 1))
                offset += length
            if batch_bytes >= max_batch_bytes or len(items) >= max_lines:
                batch.end = Position(offset, line_no, fingerprint(fh, offset))
                fh.seek(offset)  # fingerprint() moved the read position
                yield batch
                batch = Batch(size=st.st_size, stat=stat)
                items, batch_bytes = batch.items, 0
        batch.end = Position(offset, line_no, fingerprint(fh, offset))
        yield batch


@dataclass(frozen=True)
class Chunk:
    """A line-aligned byte range of a file (it ends just past a newline)."""

    start: int
    end: int


def plan(path: str | os.PathLike, pos: Position, *, min_bytes: int, block: int = 16 << 20) -> Iterator[Chunk]:
    """Line-aligned chunks of the unread part of a file, for parsing them in parallel.

    Yields nothing when the sequential reader should do the work: a backlog under
    ``min_bytes``, or a truncated or replaced file (its reset is the sequential
    path's job); stops before a block without a newline (an over-long line). Each
    chunk ends at the last newline of its block, found by reading only the block's
    last 64 KiB; line numbers are counted by the workers, so this process never
    reads the data twice."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if pos.offset > size or size - pos.offset < min_bytes or not _same_prefix(fh, pos.fingerprint):
            return
        offset = pos.offset
        while offset < size:
            stop = min(offset + block, size)
            end = -1
            window = 1 << 16
            while end < 0 and window <= stop - offset:
                fh.seek(stop - window)
                last = fh.read(window).rfind(b"\n")
                end = stop - window + last + 1 if last >= 0 else -1
                window *= 4
            if end < 0:
                fh.seek(offset)
                last = fh.read(stop - offset).rfind(b"\n")
                if last < 0:
                    return
                end = offset + last + 1
            yield Chunk(offset, end)
            offset = end


def read_chunk(path: str | os.PathLike, chunk: Chunk, *, max_line_bytes: int,
               line_base: int = 0) -> tuple[Batch, int]:
    """The lines of one planned chunk, numbered from ``line_base`` (workers do not know
    it: 0), and how many there are. ``end`` is the offset after the last complete line
    (no fingerprint: the committing process adds it)."""
    with open(path, "rb") as fh:
        fh.seek(chunk.start)
        data = fh.read(chunk.end - chunk.start)
    items: list[Line | Oversize] = []
    parts = data.split(b"\n")  # one C pass; the last part follows the last newline
    complete = parts[:-1]
    at = chunk.start
    for line_no, part in enumerate(complete, line_base + 1):
        if len(part) > max_line_bytes:
            items.append(Oversize(at, line_no, len(part)))
        else:
            items.append(Line(at, line_no, part))
        at += len(part) + 1
    # (short of the chunk's end only if the file changed while it was planned)
    return Batch(items=items, end=Position(at, line_base + len(complete))), len(complete)


def reset_event(source: str, rel: str, batch: Batch, previous: dict, kind: str):
    """The ``source.reset`` event for a tailed file read again from the start."""
    from ..store.events import Event

    log.warning("%s was %s; reading it again from the start", rel, batch.reset)
    return Event("source.reset", f"{source}:{rel}", source,
                 f"{source}|{rel}|reset|{previous.get('offset')}|{previous.get('fingerprint')}|{batch.size}",
                 {"path": rel, "kind": kind, "reason": batch.reset, "previous_offset": previous.get("offset"),
                  "size": batch.size}, source_path=rel)
