"""Transcript windows (spec §4.7): totals of transcript facts over an iteration's
(previous commit time, own commit time] and which windows a new fact can reach.

A window can span most of the history (an iteration whose predecessor's commit
is dated at the start), so totals come from prefix sums: two binary searches a
window instead of a scan. The sums follow the ``transcript_facts`` table, not
this process's own writes: the close-task hook ingests transcript lines in its
own process while the daemon runs.
"""

from __future__ import annotations

import bisect
import itertools
import json
import sqlite3
from array import array

_COLUMNS = ("ts_ns, turns, input_tokens, output_tokens, cache_read, cache_creation, tool_results, tool_errors"
            " FROM transcript_facts WHERE source IN (SELECT value FROM json_each(?))")


class PrefixSums:
    """Fact times in order and running totals of the seven counts (integer sums,
    so any window's totals equal SQL's SUM over it)."""

    def __init__(self, rows) -> None:
        columns = list(zip(*rows)) or [()] * 8  # one pass in C per column, not seven appends a row
        self.ts = array("q", columns[0])
        self.sums = [array("q", itertools.accumulate(c, initial=0)) for c in columns[1:]]

    def __len__(self) -> int:
        return len(self.ts)

    def total(self, start: int | None, end: int) -> tuple[int, ...]:
        i = bisect.bisect_right(self.ts, start) if start is not None else 0
        j = bisect.bisect_right(self.ts, end)
        return tuple(s[j] - s[i] for s in self.sums) if j > i else (0,) * 7


class FactSums:
    """Window totals over the facts of a set of transcript directories, kept
    current by ``refresh`` at the start of each scoring pass.

    Rebuilding the sums costs ~1 µs a fact (20 ms at 20,000), and a daemon
    refreshes after every appended line, so facts added since the last rebuild
    go into a small second set of sums (``delta``) instead. The table says what
    changed: facts are only ever appended (with the seq of the event that
    brought them) or deleted (a truncated or replaced transcript), so with
    ``count`` and ``max(seq)`` as of the last refresh, the rows with a higher seq
    are exactly the new ones unless the count disagrees (something was deleted
    or replaced), and then everything is read again."""

    DELTA_MAX = 2048  # facts kept in the delta before it is folded into the base

    def __init__(self, dirs: tuple[str, ...]) -> None:
        self.dirs = json.dumps(list(dirs))
        self.count = self.seq = -1
        self.base = PrefixSums(())
        self.fresh: list[tuple] = []
        self.delta = PrefixSums(())

    def refresh(self, conn: sqlite3.Connection) -> None:
        count, seq = conn.execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM transcript_facts"
            " WHERE source IN (SELECT value FROM json_each(?))", (self.dirs,)).fetchone()
        if (count, seq) == (self.count, self.seq):
            return
        if self.count >= 0 and seq > self.seq:
            new = [tuple(r) for r in conn.execute(f"SELECT {_COLUMNS} AND seq > ?", (self.dirs, self.seq))]
            if self.count + len(new) == count and len(self.fresh) + len(new) <= self.DELTA_MAX:
                self.fresh = sorted(self.fresh + new)
                self.delta = PrefixSums(self.fresh)
                self.count, self.seq = count, seq
                return
        self.base = PrefixSums(conn.execute(f"SELECT {_COLUMNS} ORDER BY ts_ns", (self.dirs,)))
        self.fresh, self.delta = [], PrefixSums(())
        self.count, self.seq = count, seq

    def total(self, start: int | None, end: int) -> tuple[int, ...]:
        base = self.base.total(start, end)
        if not self.fresh:
            return base
        return tuple(a + b for a, b in zip(base, self.delta.total(start, end)))


class Ends:
    """Each iteration's commit time (ns; None when its commit does not resolve), kept in
    iteration order as iterations come and go, so that the iterations a change moves
    are found by binary search, not by sorting and walking the log (at 100,000
    iterations that cost every close ~20 ms)."""

    def __init__(self, at: dict[int, int | None]) -> None:
        self.at = dict(at)
        self.order = sorted(self.at)

    def __setitem__(self, it: int, end: int | None) -> None:
        if it not in self.at:
            if self.order and it > self.order[-1]:
                self.order.append(it)  # the usual case: a new iteration closes
            else:
                bisect.insort(self.order, it)
        self.at[it] = end

    def pop(self, it: int) -> None:
        if self.at.pop(it, _MISSING) is not _MISSING:
            del self.order[bisect.bisect_left(self.order, it)]

    def items(self) -> list[tuple[int, int | None]]:
        return [(it, self.at[it]) for it in self.order]

    def successors(self, changed: set[int]) -> set[int]:
        """For each changed iteration, the next one in order whose commit resolves: its
        window starts where the changed one's ends, or, when the changed one was removed,
        where the one before it ends (it holds the removed one's window now)."""
        out = set()
        order, at = self.order, self.at
        for it in changed:
            for j in range(bisect.bisect_right(order, it), len(order)):
                if at[order[j]] is not None:
                    out.add(order[j])
                    break
        return out


_MISSING = object()


def windows_meeting(ends: list[tuple[int, int | None]], spans: list[tuple[int, int]]) -> set[int]:
    """Iterations whose window (previous resolved end, own end] meets one of the
    [lo, hi] spans of new transcript facts (a superset of the exact windows hit;
    rescoring is gated by the inputs hash)."""
    out = set()
    for lo, hi in spans:
        prev = None
        for it, end in ends:
            if end is None:
                continue
            if lo <= end and (prev is None or hi > prev):
                out.add(it)
            prev = end
    return out
