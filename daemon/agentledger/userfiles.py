"""Every file a user names (``--config``, ``[cost] prices``, an ``import`` input, a
``lint`` input) is read through here, bounded: only a regular file (``/dev/zero``, a
directory or a socket is refused by its kind, before a byte is read), opened without
waiting (a FIFO named where a file goes opens at once and is refused, never hangs), and
no more than a cap (a file larger than it is refused, whatever its size says: a file
that grows as it is read is cut at the cap and refused too). Lines read one by one are
capped each (``lines``), so a file of one endless line is refused, not held.

Standard library only, and importable by every package."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator

from .errors import AgentledgerError

CONFIG_BYTES = 1 << 20  # a configuration or price file
LINT_BYTES = 64 << 20  # a Markdown file given to lint
LINE_BYTES = 256 << 20  # one line of an export (a whole archive's event can be large)


class UserFileError(AgentledgerError):
    """A file a user named that is not one to read (its kind, its size): one line, exit 1."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike, what: str) -> int:
    """A descriptor of ``path`` opened read-only without waiting, checked to be a regular
    file (raises ``UserFileError``; ``OSError`` for a file that cannot be opened)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserFileError(f"{what} {os.fspath(path)}: {_kind(mode)}, not a regular file; refused")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes."""
    fd = open_regular(path, what)
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > limit:
            raise UserFileError(f"{what} {os.fspath(path)}: larger than {limit:,} bytes; refused")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UserFileError(f"{what} {os.fspath(path)}: larger than {limit:,} bytes; refused")
    return data


def read_text(path: str | os.PathLike, what: str, limit: int = CONFIG_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8 (``UnicodeDecodeError`` for a file that is not)."""
    return read_bytes(path, what, limit).decode("utf-8")


def open_lines(path: str, what: str) -> io.TextIOWrapper:
    """A regular file (or ``-``: standard input, which must not be a device either) for
    ``lines``."""
    if path == "-":
        import sys

        mode = os.fstat(sys.stdin.fileno()).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode):
            raise UserFileError(f"{what} (standard input): {_kind(mode)}; refused")
        return sys.stdin  # type: ignore[return-value]
    return io.TextIOWrapper(os.fdopen(open_regular(path, what), "rb"), encoding="utf-8")


def lines(fh, what: str, limit: int = LINE_BYTES) -> Iterator[str]:
    """The lines of ``fh``, each at most ``limit`` characters (a longer one: ``UserFileError``,
    after reading no more than the limit of it)."""
    n = 0
    while line := fh.readline(limit + 1):
        n += 1
        if len(line) > limit and not line.endswith("\n"):
            raise UserFileError(f"{what}: line {n} is longer than {limit:,} characters; refused (nothing was read)")
        yield line
