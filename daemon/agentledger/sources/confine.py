"""What a source may read, and what it may repeat of what it read.

Every file a source reads must resolve inside that source's configured tree (the
iteration-log directory, the repository for the artifacts and plans its records
name, the vally or transcript directory): a symbolic link that leads elsewhere
(``iter-97.yaml -> /etc/passwd``) is refused by name, never opened, so nothing of
its target reaches the ledger, a quarantine reason or the team ledger. The file
that is read is the checked path, opened with ``O_NOFOLLOW`` by every reader (whole
files and the JSONL tailer alike: ``open_checked``), so a link swapped in after the
check is refused by the kernel.

A quarantine reason repeats at most a short, escaped excerpt of the file's own
bytes (``bounded``): parser messages quote what they choke on.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..terminal import shown, shown_lines

REASON_CHARS = 300  # a quarantine reason is at most this long


class Outside(OSError):
    """The path resolves outside the source's tree; ``strerror`` says so, naming the link only."""


def resolve_within(path: str | Path, root: str | Path) -> str | Path:
    """``path`` as it is to be opened: itself when no component below ``root`` is a link,
    else with every link resolved; Outside when that is not inside ``root`` (itself
    resolved: a configured directory may be a link).

    A path under ``root`` none of whose components below it is a link (most of what a
    scan reads: the log directory's own files, the repository's artifacts) is inside it
    whatever ``root`` resolves to: one ``lstat`` a component below ``root`` instead of
    resolving both paths component by component (a dozen each; ~30 % of reading an
    artifact). A link anywhere below ``root``, a ``..`` or a component that is not there
    is resolved whole. Opened with ``O_NOFOLLOW``, a link swapped in at the last
    component after this check is still refused."""
    if _plainly_within(str(path), str(root).rstrip(os.sep)):
        return path
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise Outside(f"{shown(os.path.basename(path))} is a symbolic link that leads outside {shown(root)}; not read")
    return Path(real)


def _plainly_within(path: str, root: str) -> bool:
    """``path`` is ``root`` followed by names (no ``.``, ``..`` or empty one), each there
    and none a symbolic link."""
    if not path.startswith(root + os.sep):
        return False
    at = root
    for name in path[len(root) + 1:].split(os.sep):
        if name in ("", ".", ".."):
            return False
        at = f"{at}{os.sep}{name}"
        try:
            if stat.S_ISLNK(os.lstat(at).st_mode):
                return False
        except OSError:
            return False  # resolved whole, and refused or read as the kernel says
    return True


def open_within(path: str | Path, root: str | Path):
    """A binary file object for ``path``, refused (Outside) when it resolves outside ``root``."""
    return open_checked(resolve_within(path, root))


def open_checked(path: str | os.PathLike, buffering: int = -1):
    """A path ``resolve_within`` returned, opened for reading without following a link
    at its last component: a link swapped in after the check is refused (``ELOOP``), not
    followed out of the tree; and only a regular file (a FIFO is opened without waiting
    for a writer, then refused: one named ``results.jsonl`` held a scan up for good).
    Every reader of a source's files opens them so."""
    fh = open(path, "rb", buffering=buffering, opener=_no_follow)
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
        fh.close()
        raise OSError(errno.EINVAL, "not a regular file; not read")
    return fh


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def bounded(reason: str) -> str:
    """A quarantine reason fit to store, show and ship: control characters escaped
    (``\\x00``; the line breaks of a multi-line parser message stay: ``terminal.shown_lines``),
    at most ``REASON_CHARS`` characters."""
    return shown_lines(reason, REASON_CHARS)
