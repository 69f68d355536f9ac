"""A run of sidecar replacements that frees no inode: each new file is swapped into
place, and the file swapped out becomes the temp file of the next write.

Why: replacing a file by renaming a new one over it frees the old inode and its
blocks. On ext4 without a journal (this project's machines) the inode allocator then
steps over every inode freed in the last minute (six minutes while its table block is
still dirty), one check each, for every new file in that block group; and with the ``discard`` mount
option each freed block is discarded synchronously, inside the rename, under the
directory's lock. Replacing 10,000 sidecars took 1.3-2.0 s here, mostly waiting, and
longer after any other mass delete. ``renameat2(RENAME_EXCHANGE)`` swaps the two names
instead: nothing is freed or allocated, and readers still see the old file or the new
one, never part of either.

The file swapped out is written again only when nothing else can see it change: it
is a regular file of ours with no other name (one link), and the kernel grants a write
lease on it (``F_SETLEASE``), which it does only while no other descriptor has it open
(a reader that opened the old sidecar before the swap keeps its bytes: the inode is
then removed, not reused). Anything else, or a system without the call, takes the
ordinary path (a new temp file, ``os.replace``).

Durability is the caller's as before: an fsynced write is fsynced before the swap. An
unsynced bulk write (``[sidecars] fsync = "auto"``) is atomic against a crash of the
process, not against power loss, with either path.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import stat

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2():
    """libc's ``renameat2`` through ctypes (the standard library has no binding), or
    None where there is none. ctypes is imported only by a bulk pass that writes; its
    import needs no writable and executable memory (checked under PR_SET_MDWE, what the
    units' MemoryDenyWriteExecute sets), and any failure of it means the ordinary path."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except Exception:  # noqa: BLE001 - no ctypes, no libc symbol, no memory for it: rename as before
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn, ctypes.get_errno


class Spares:
    """The temp files a run of writes may reuse, one a directory; those left over are
    removed when the run ends (``close``, or the ``with`` block)."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, str, os.stat_result]] = {}
        # False once there is no such call or the file system refuses it; asked at the first
        # swap, so that a sync that writes nothing loads no ctypes (~2 ms of a re-ingest)
        self.exchanges = True
        self.leases = True  # False once the kernel refuses leases here (not EAGAIN: "in use")

    def __enter__(self) -> Spares:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def take(self, directory: str) -> tuple[int, str, os.stat_result] | None:
        """A temp file in ``directory`` to write the next sidecar into (its descriptor,
        open for writing, its name and its stat), or None: make a new one."""
        return self._held.pop(directory, None)

    def swap(self, tmp: str, path: str) -> bool:
        """Swap ``tmp`` (the new bytes, written) and ``path`` (the old file); then
        ``tmp`` names the old file, kept for the next write when nobody can see it
        change, removed otherwise. False: not swapped (no such call here, or the old
        file is gone): the caller renames as usual."""
        call = _renameat2() if self.exchanges else None
        if call is None:
            self.exchanges = False
            return False
        fn, get_errno = call
        if fn(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) != 0:
            err = get_errno()
            if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
                self.exchanges = False
            if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOENT):
                return False
            raise OSError(err, os.strerror(err), path)
        try:
            self._keep(os.path.dirname(tmp), tmp)
        except IsADirectoryError:  # a directory swapped in at the target since its lstat: put it back
            fn(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE)
            raise IsADirectoryError(errno.EISDIR, "is a directory", path) from None
        return True

    def _keep(self, directory: str, tmp: str) -> None:
        """Keep the file now at ``tmp`` for the next write, or remove it; a directory
        there raises ``IsADirectoryError`` (opening it for writing, or unlinking it)."""
        fd = -1
        try:
            if self.leases and directory not in self._held:
                # (not waiting: a FIFO swapped in at the target since its lstat has no reader)
                fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid():
                    try:
                        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)  # granted: no other open file
                        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
                    except OSError as exc:
                        if exc.errno != errno.EAGAIN:
                            self.leases = False
                    else:
                        self._held[directory] = (fd, tmp, st)
                        return
        except IsADirectoryError:
            raise
        except OSError:
            pass
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        held, self._held = self._held, {}
        for fd, tmp, _ in held.values():
            os.close(fd)
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
