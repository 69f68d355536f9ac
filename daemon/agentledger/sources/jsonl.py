"""Tail an append-only JSONL file from a stored position, in bounded batches.

What the caller stores per file (its checkpoint) is ``(offset, line_no,
fingerprint)``: the byte offset just past the last complete line consumed, how
many lines that was, and a hash of the file's first bytes. The caller commits
the checkpoint in the same transaction as the events made from the lines, so
a crash re-reads at most one uncommitted batch, and idempotency keys drop what
was already appended.

* A partial last line (no ``\\n`` yet) is not consumed: it waits, unless the
  caller's ``complete`` predicate says it is one whole record already (a JSON
  object: nothing but whitespace can follow its closing brace on a valid line).
  Such a line is consumed as an ``OpenLine`` and the position remembers it
  (``Position.open``: its length and hash). The next read looks at it again:
  the same bytes, later ended by a newline, are not taken twice; bytes that
  turn out to continue it make it a new line at the same offset, and the batch
  says so (``Batch.reopened``) so that what was made of the old one is replaced.
* A line longer than ``max_line_bytes`` is reported (``Oversize``) and skipped
  to its newline without being held in memory; one that has no newline yet is
  reported at once (``Oversize.ended`` false: a writer that never ends it, or a 1 GiB
  file of one line, is a quarantine record now, not a wait at every read), the
  position moves past the bytes seen (``Position.open`` is ``SKIPPING``), and the
  reads after skip on to its newline, then read lines again.
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from .confine import open_checked

log = logging.getLogger("agentledger")
FINGERPRINT_BYTES = 4096
CHUNK = 1 << 20
SKIPPING = "skipping"  # Position.open: inside an over-long line whose newline has not come yet


@dataclass(frozen=True)
class Position:
    offset: int = 0
    line_no: int = 0
    fingerprint: str | None = None  # "<length>:<sha256 of the first length bytes>"
    open: str | None = None  # the last line consumed had no newline: "<length>:<sha256 of it>"


class Line(NamedTuple):  # a tuple: one is made per line, and that cost shows in bulk reads
    offset: int  # byte offset of the line's first byte
    line_no: int  # 1-based
    data: bytes  # without the trailing newline


class OpenLine(Line):
    """A last line without its newline that is one complete record already."""

    __slots__ = ()


@dataclass(frozen=True)
class Oversize:
    offset: int
    line_no: int
    length: int  # bytes seen before giving up (at least max_line_bytes + 1)
    ended: bool = True  # False: no newline yet (the bytes after it are skipped to the newline)


@dataclass
class Batch:
    items: Iterable[Line | Oversize] = field(default_factory=list)  # a list, or streamed (workers)
    end: Position = Position()  # where the next read starts (commit this with the events)
    reset: str | None = None  # "truncated" | "replaced" when this batch restarted at 0
    size: int = 0  # file size when read (lag = size - end.offset)
    stat: tuple[int, int, int, int] | None = None  # dev, ino, size, mtime_ns
    reopened: int | None = None  # offset of an open line that turned out to continue (its records are replaced)


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


def _digest(data: bytes) -> str:
    return f"{len(data)}:{hashlib.sha256(data).hexdigest()[:32]}"


def _lines(fh, offset: int, line_no: int, cap: int, end: int | None = None,
           complete: Callable[[bytes], bool] | None = None) -> Iterator[Line | Oversize]:
    """The complete lines of ``fh`` (positioned at ``offset``) up to ``end``, or up to a
    partial last line, which is left unread. Lines come from the buffered reader's
    ``readline`` with a length cap: C code, one copy per line, and a line is freed
    once its consumer is done with it, so the same memory serves the next (bulk
    reads spent a third of their time faulting in fresh pages when a chunk was read
    and split whole)."""
    readline = fh.readline
    while end is None or offset < end:
        line = readline(cap)
        if not line:
            return
        if line[-1] == 10:  # b"\n"
            line_no += 1
            yield Line(offset, line_no, line[:-1])
            offset += len(line)
        elif len(line) < cap:
            if complete is not None and complete(line):
                yield OpenLine(offset, line_no + 1, line)
            return  # a partial last line waits for its newline
        else:  # over-long: skip to its newline without holding it
            length = len(line)
            while (more := readline(CHUNK)) and more[-1] != 10:
                length += len(more)
            if not more:  # no newline yet: said now, and skipped to its newline by the reads after
                yield Oversize(offset, line_no + 1, length, ended=False)
                return
            line_no += 1
            length += len(more)
            yield Oversize(offset, line_no, length - 1)
            offset += length


def _after(item: Line | Oversize) -> int:
    if isinstance(item, OpenLine):
        return item.offset + len(item.data)
    if isinstance(item, Oversize) and not item.ended:
        return item.offset + item.length
    return item.offset + (len(item.data) if isinstance(item, Line) else item.length) + 1


def _skip(fh, pos: Position) -> Position:
    """Past the newline that ends the over-long line being skipped, or, with none yet,
    past every byte there is (still ``SKIPPING``), reading ``CHUNK`` at a time."""
    fh.seek(pos.offset)
    offset = pos.offset
    while more := fh.readline(CHUNK):
        offset += len(more)
        if more[-1] == 10:
            here = Position(offset, pos.line_no, fingerprint(fh, offset))
            fh.seek(offset)
            return here
    here = Position(offset, pos.line_no, fingerprint(fh, offset), SKIPPING)
    fh.seek(offset)
    return here


def _reopen(fh, pos: Position, cap: int) -> tuple[Position, int | None] | None:
    """Where to read on from a position after an open line: past it when the same
    bytes have since been ended by a newline (already taken), None when nothing
    changed, else from the line's start again (returned as the reopened offset)."""
    length = int(pos.open.partition(":")[0])  # type: ignore[union-attr]
    start = pos.offset - length
    fh.seek(start)
    line = fh.readline(cap)
    ended = line.endswith(b"\n")
    body = line[:-1] if ended else line
    if _digest(body[:length]) == pos.open and not body[length:].strip():
        if not ended:
            return None
        return Position(start + len(line), pos.line_no, pos.fingerprint), None
    return Position(start, pos.line_no - 1, pos.fingerprint), start


def tail(path: str | os.PathLike, pos: Position, *, max_line_bytes: int = 16 << 20,
         max_batch_bytes: int = 8 << 20, max_lines: int = 2000,
         complete: Callable[[bytes], bool] | None = None) -> Iterator[Batch]:
    """Batches of complete lines from ``pos`` on; stops at a partial line or end of file
    (an open last line that ``complete`` accepts is taken: see the module's notes).
    Raises ``OSError`` when the file cannot be opened (missing, a directory, …)."""
    with open_checked(path, CHUNK) as fh:
        st = os.fstat(fh.fileno())
        stat = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        reset = None
        if pos.offset > st.st_size:
            reset = "truncated"
        elif not _same_prefix(fh, pos.fingerprint):
            reset = "replaced"
        if reset:
            pos = Position()
        reopened = None
        if pos.open == SKIPPING:
            pos = _skip(fh, pos)
            if pos.open == SKIPPING:  # still no newline
                yield Batch(end=pos, size=st.st_size, stat=stat)
                return
        if pos.open:
            moved = _reopen(fh, pos, max_line_bytes + 1)
            if moved is None:
                yield Batch(end=pos, size=st.st_size, stat=stat)
                return
            pos, reopened = moved
        offset, line_no = pos.offset, pos.line_no
        fh.seek(offset)
        batch = Batch(reset=reset, size=st.st_size, stat=stat, reopened=reopened)
        items, start = [], offset

        def end(item: Line | Oversize | None) -> Position:
            is_open = isinstance(item, OpenLine)
            skipping = isinstance(item, Oversize) and not item.ended
            here = Position(offset, line_no, fingerprint(fh, offset),
                            _digest(item.data) if is_open else SKIPPING if skipping else None)
            fh.seek(offset)  # fingerprint() moved the read position
            return here

        last = None
        for last in _lines(fh, offset, line_no, max_line_bytes + 1, complete=complete):
            items.append(last)
            offset, line_no = _after(last), last.line_no
            if offset - start >= max_batch_bytes or len(items) >= max_lines:
                batch.items, batch.end = items, end(last)
                yield batch
                batch = Batch(size=st.st_size, stat=stat)
                items, start = [], offset
        batch.items, batch.end = items, end(last)
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
    with open_checked(path) as fh:
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


def chunk_lines(path: str | os.PathLike, chunk: Chunk, *, max_line_bytes: int,
                line_base: int = 0) -> Iterator[Line | Oversize]:
    """The lines of one planned chunk, streamed, numbered from ``line_base`` (workers do
    not know it: 0). A chunk ends at a newline, so every line in it is complete (a
    file changed since it was planned is caught by the fingerprint at the next read)."""
    with open_checked(path, CHUNK) as fh:
        fh.seek(chunk.start)
        yield from _lines(fh, chunk.start, line_base, max_line_bytes + 1, chunk.end)


def reset_event(source: str, rel: str, batch: Batch, previous: dict, kind: str):
    """The ``source.reset`` event for a tailed file read again from the start."""
    from ..store.events import Event

    log.warning("%s was %s; reading it again from the start", rel, batch.reset)
    return Event("source.reset", f"{source}:{rel}", source,
                 f"{source}|{rel}|reset|{previous.get('offset')}|{previous.get('fingerprint')}|{batch.size}",
                 {"path": rel, "kind": kind, "reason": batch.reset, "previous_offset": previous.get("offset"),
                  "size": batch.size}, source_path=rel)
