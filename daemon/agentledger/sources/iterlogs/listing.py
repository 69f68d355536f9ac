"""One listing of an iteration-log directory, every entry stat'ed once, and its mark.

The mark is a few sums over the stats of every entry (score sidecars and temp files
too) and of the directory itself, ``st_ctime_ns`` included: a file that is written,
truncated, renamed, chmod'ed or replaced gets a new ctime, which no writer can set
back, and the directory a new mtime when a name comes or goes. So a listing whose
mark equals one taken when the ledger was in line with the directory (``ledger/
scan_marks.py``) shows nothing changed there, and a scan can skip comparing each
file with its checkpoint and each sidecar with the ledger: what the mark costs is the
listing and a stat an entry, which any scan pays.

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
    """``others``: stat key (dev, ino, size, mtime_ns) of each entry that is neither a
    sidecar nor one of our temp files, None when it could not be stat'ed (``observe`` says
    why); ``logs``: those of them named like a log file (classified only when asked: a
    scan that trusts the mark never asks); ``temps``: names of our sidecar writers' temp
    files (the sweep that follows needs no listing of its own); ``sidecars``: stat key of
    each score and session sidecar (the comparison with the ledger that follows needs no
    stat of its own); ``mark``: see the module docstring, None when the listing cannot vouch
    for the directory (an entry changed too lately or could not be stat'ed)."""

    others: dict[str, tuple[int, int, int, int] | None]
    temps: list[str]
    sidecars: dict[str, tuple[int, int, int, int]]
    mark: str | None

    @functools.cached_property
    def logs(self) -> dict[str, tuple[int, int, int, int] | None]:
        return {name: key for name, key in self.others.items() if classify(name) is not None}


def list_log_dir(src: IterationLogSource) -> Listing:
    """Raises ``OSError`` when the directory cannot be listed: an empty answer would read
    as "every file was removed"."""
    began = time.time_ns()
    others: dict[str, tuple[int, int, int, int] | None] = {}
    temps: list[str] = []
    sidecars: dict[str, tuple[int, int, int, int]] = {}
    count = inos = sizes = mtimes = ctimes = newest = 0
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
                    inos += key[1]
                    sizes += key[2]
                    mtimes += key[3]
                    ctime = st.st_ctime_ns
                    ctimes += ctime
                    if ctime > newest:
                        newest = ctime
                if name.endswith(".score.yaml"):  # most names of a scored log
                    if key is not None:
                        sidecars[name] = key
                elif name.startswith(TEMP_PREFIX):  # (never a log file's name)
                    temps.append(name)
                else:
                    others[name] = key
    finally:
        os.close(fd)
    newest = max(newest, here.st_ctime_ns, here.st_mtime_ns)
    mark = None
    if whole and newest < began - RACY_NS:
        mark = (f"{here.st_dev}:{here.st_ino}:{here.st_mtime_ns}:{here.st_ctime_ns}:"
                f"{count}:{inos}:{sizes}:{mtimes}:{ctimes}")
    return Listing(others, temps, sidecars, mark)
