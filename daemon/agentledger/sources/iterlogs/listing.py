"""One listing of an iteration-log directory, every entry stat'ed once, and its mark.

The mark is the directory's own stat, the count of its entries (score sidecars and temp
files too) and the sum of their ``st_ctime_ns``: a file that is written, truncated,
renamed, chmod'ed or replaced gets a new ctime, the time of the change, which no writer
can set, and the directory a new mtime when a name comes or goes. So a listing whose
mark equals one taken when the ledger was in line with the directory (``ledger/
scan_marks.py``) shows nothing changed there, and a scan can skip comparing each
file with its checkpoint and each sidecar with the ledger: what the mark costs is the
listing and a stat an entry, which any scan pays. (Sums of the inodes, sizes and
mtimes as well added nothing a change does not already move the ctimes by, and cost
~23 million instructions of a scan at 10,000 iterations: every addition of a large
number makes a new integer.)

File timestamps advance in clock ticks (a few ms on Linux), so a file changed again
within the tick of the stat that saw it would keep its ctime: a listing in which any
entry changed less than ``RACY_NS`` before it began has no mark (git's "racily clean"
index entries are the same problem).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

from ...config import IterationLogSource
from ...output.sidecars import TEMP_PREFIX
from .files import classify

RACY_NS = 100_000_000  # a tick is 1-10 ms on Linux (HZ 1000-100); room for a coarser file system's


@dataclass
class Listing:
    """``entries``: each entry's name and stat key (dev, ino, size, mtime_ns), None when it
    could not be stat'ed (``observe`` says why), in the directory's order; ``mark``: see the
    module docstring, None when the listing cannot vouch for the directory (an entry changed
    too lately or could not be stat'ed). The entries are sorted into their kinds only when
    asked: a scan that trusts the mark never asks (sorting them as they were listed cost
    ~20 million instructions of a scan at 10,000 iterations)."""

    entries: list[tuple[str, tuple[int, int, int, int] | None]]
    mark: str | None

    @functools.cached_property
    def _kinds(self) -> tuple[dict, list[str], dict]:
        others: dict[str, tuple[int, int, int, int] | None] = {}
        temps: list[str] = []
        sidecars: dict[str, tuple[int, int, int, int]] = {}
        for name, key in self.entries:
            if name.endswith(".score.yaml"):  # most names of a scored log
                if key is not None:
                    sidecars[name] = key
            elif name.startswith(TEMP_PREFIX):  # (never a log file's name)
                temps.append(name)
            else:
                others[name] = key
        return others, temps, sidecars

    @property
    def others(self) -> dict[str, tuple[int, int, int, int] | None]:
        """Each entry that is neither a sidecar nor one of our temp files."""
        return self._kinds[0]

    @property
    def temps(self) -> list[str]:
        """Names of our sidecar writers' temp files (the sweep that follows needs no listing of its own)."""
        return self._kinds[1]

    @property
    def sidecars(self) -> dict[str, tuple[int, int, int, int]]:
        """Stat key of each score and session sidecar (the comparison with the ledger that
        follows needs no stat of its own)."""
        return self._kinds[2]

    @functools.cached_property
    def logs(self) -> dict[str, tuple[int, int, int, int] | None]:
        """Those of ``others`` named like a log file."""
        return {name: key for name, key in self.others.items() if classify(name) is not None}


def list_log_dir(src: IterationLogSource) -> Listing:
    """Raises ``OSError`` when the directory cannot be listed: an empty answer would read
    as "every file was removed"."""
    began = time.time_ns()
    entries: list[tuple[str, tuple[int, int, int, int] | None]] = []
    count = ctimes = newest = 0
    whole = True
    # entries stat'ed relative to the directory's descriptor (fstatat): one name looked
    # up a stat instead of the whole path
    fd = os.open(src.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        here = os.fstat(fd)
        with os.scandir(fd) as it:
            for e in it:
                name = e.name
                try:
                    st = e.stat()  # follows a link, as observe's os.stat does
                except OSError:
                    key = None
                    whole = False
                else:
                    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                    count += 1
                    ctime = st.st_ctime_ns
                    ctimes += ctime
                    if ctime > newest:
                        newest = ctime
                entries.append((name, key))
    finally:
        os.close(fd)
    newest = max(newest, here.st_ctime_ns, here.st_mtime_ns)
    mark = None
    if whole and newest < began - RACY_NS:
        mark = (f"{here.st_dev}:{here.st_ino}:{here.st_mtime_ns}:{here.st_ctime_ns}:"
                f"{count}:{ctimes}")
    return Listing(entries, mark)
