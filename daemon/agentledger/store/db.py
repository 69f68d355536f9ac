"""SQLite connections: pragmas, the one-writer transaction, read-only access.

Every connection is stdlib ``sqlite3`` in autocommit mode; writes happen only
inside ``write_transaction``, which takes the write lock up front with
``BEGIN IMMEDIATE`` (so ``busy_timeout`` applies) and retries with backoff if
another process holds it longer than that. sqlite-utils is layered on top
where its conveniences help (migrations, ``query``), never on the hot path.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MIN_SQLITE = (3, 37, 0)  # STRICT tables
BUSY_TIMEOUT_MS = 10_000


class StoreError(RuntimeError):
    pass


def _check_version() -> None:
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(f"SQLite {sqlite3.sqlite_version} is too old: agentledger needs "
                         f"{'.'.join(map(str, MIN_SQLITE))} or newer (STRICT tables)")


def connect(path: str | Path, *, synchronous: str = "FULL", create: bool = True) -> sqlite3.Connection:
    """A read-write connection with the ledger's pragmas, migrated to the latest schema."""
    _check_version()
    path = Path(path)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.exists():
        raise StoreError(f"no ledger at {path}")
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    sync = synchronous.upper()
    if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise StoreError(f"invalid synchronous setting {synchronous!r}")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA journal_size_limit = 67108864")
    conn.execute("PRAGMA cache_size = -65536")  # 64 MiB of page cache
    from .migrate import ensure_latest

    ensure_latest(conn)
    return conn


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """A connection that cannot write: ``mode=ro`` plus ``query_only``."""
    _check_version()
    path = Path(path)
    if not path.exists():
        raise StoreError(f"no ledger at {path}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                           isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only = ON")
    return conn


@contextmanager
def write_transaction(conn: sqlite3.Connection, *, attempts: int = 8) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; rolls back on error.

    ``BEGIN IMMEDIATE`` waits up to busy_timeout for the write lock; if another
    writer holds it longer, retry with jittered backoff rather than fail with
    "database is locked" (the close-task hook runs beside the daemon)."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if attempt == attempts - 1:
                raise StoreError(f"the ledger stayed locked by another writer: {exc}") from exc
            time.sleep(delay + random.random() * delay)
            delay = min(delay * 2, 2.0)
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def default_store_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "agentledger" / "ledger.sqlite"
