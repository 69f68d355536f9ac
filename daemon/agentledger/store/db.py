"""SQLite connections: pragmas, the one-writer transaction, read-only access.

Every connection is stdlib ``sqlite3`` in autocommit mode; writes happen only
inside ``write_transaction``, which takes the write lock up front with
``BEGIN IMMEDIATE`` (so ``busy_timeout`` applies) and retries with backoff if
another process holds it longer than that. sqlite-utils is layered on top
where its conveniences help (migrations, ``query``), never on the hot path.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import AgentledgerError

MIN_SQLITE = (3, 37, 0)  # STRICT tables
BUSY_TIMEOUT_MS = 10_000
PAGE_SIZE = 16384


class StoreError(AgentledgerError):
    """The ledger cannot be opened or written (locked, newer, not a ledger)."""


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
    if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
        # A new ledger: 16 KiB pages (fixed once the first table exists). The ledger is
        # written in bulk and append-mostly; bigger pages mean fewer WAL frames and
        # checkpoint copies per byte (bulk tailing measured ~20 % less SQLite time).
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    sync = synchronous.upper()
    if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise StoreError(f"invalid synchronous setting {synchronous!r}")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA journal_size_limit = 67108864")
    conn.execute("PRAGMA cache_size = -65536")  # 64 MiB of page cache
    conn.execute("PRAGMA analysis_limit = 400")  # statistics from samples: ``optimize`` stays cheap
    from .migrate import ensure_latest

    ensure_latest(conn)
    return conn


def optimize(conn: sqlite3.Connection) -> None:
    """Give the query planner statistics on what this connection queried (SQLite's advice
    for short-lived connections: ``PRAGMA optimize`` before closing). Without them it
    chose, at 100,000 iterations, to scan an index of every iteration for a look-up of
    fifteen of them (~10 ms). A no-op in microseconds when the statistics are current;
    sampled (``analysis_limit``) when not: ~2 ms. Never waits long for the write lock."""
    try:
        conn.execute("PRAGMA busy_timeout = 100")
        conn.execute("PRAGMA optimize")
    except sqlite3.Error:
        pass  # another writer holds the ledger: the next command or pass does it
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def read_state(conn: sqlite3.Connection, key: str) -> str | None:
    """One value of the ``ledger_state`` projection (active rubric, backfill, …)."""
    row = conn.execute("SELECT value FROM ledger_state WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


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


# PRAGMAs that only read, even when given an argument (a table, an index, a schema).
_READING_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check", "database_list",
    "collation_list", "function_list", "module_list", "pragma_list", "compile_options",
})


class Refusals:
    """Why the last statement was refused by ``refuse_side_effects``' authorizer."""

    def __init__(self) -> None:
        self.reason: str | None = None


def refuse_side_effects(conn: sqlite3.Connection) -> Refusals:
    """Deny, while a statement is prepared (before SQLite touches any file), what a
    read-only connection would still let through or fail at late: ATTACH (which
    creates the file it names), VACUUM and VACUUM INTO (SQLite authorizes them as an
    ATTACH), DETACH, and PRAGMAs that set something (``journal_mode = delete`` is
    otherwise a "disk I/O error"). Reading PRAGMAs stay allowed."""
    refusals = Refusals()

    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
        if action == sqlite3.SQLITE_ATTACH:
            refusals.reason = ("VACUUM is refused: the ledger is read-only here" if arg1 == "" or arg1 is None
                               else f"ATTACH and VACUUM INTO are refused: they would create {arg1!r}")
        elif action == sqlite3.SQLITE_DETACH:
            refusals.reason = "DETACH is refused: nothing can be attached here"
        elif action == sqlite3.SQLITE_PRAGMA and arg2 is not None and (arg1 or "").lower() not in _READING_PRAGMAS:
            refusals.reason = f"PRAGMA {arg1} = {arg2} is refused: the ledger is read-only here"
        else:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    conn.set_authorizer(authorize)
    return refusals


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


@contextmanager
def bulk_commits(conn: sqlite3.Connection, *, wal_bytes: int = 64 << 20) -> Iterator[Callable[[], None]]:
    """Commit a run of transactions (a bulk catch-up) cheaply; make them durable together.

    * Under ``synchronous = FULL`` every commit waits for an fsync of the WAL. A bulk
      catch-up commits dozens of chunks of one file, each with its read position, and
      tells nobody outside the ledger about them until it is over, so they are
      committed under NORMAL (in WAL mode: atomic, consistent, durable against a crash
      of this process, not against a power cut) and the last one with the configured
      setting, whose fsync of the WAL makes every earlier frame durable too. A power
      cut in between loses only chunks whose positions went with them: they are read
      again from the file. (Checkpoints sync the WAL as well, which bounds what is
      ever at risk to one checkpoint interval.)
    * Each commit rewrites every index page it touched into the WAL, and the default
      checkpoint (every 1,000 pages) copies each of those into the database, with
      two fsyncs. Checkpointing every ``wal_bytes`` instead copies a page rewritten by
      many chunks once (1 GB of vally results: ~1 GB of page writes → about half).
      The WAL grows to ~64 MiB meanwhile and is cut back (``journal_size_limit``) by
      the first checkpoint after the bulk.

    Yields the function to call just before the last commit; leaving the block
    restores both settings in any case."""
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    (pages,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    wal_pages = wal_bytes // conn.execute("PRAGMA page_size").fetchone()[0]
    relaxed = level > 1  # 2 = FULL, 3 = EXTRA; OFF and NORMAL stay as they are
    restored = False

    def restore() -> None:
        nonlocal restored
        if not restored:
            restored = True
            conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")
            if relaxed:
                conn.execute(f"PRAGMA synchronous = {level}")

    if relaxed:
        conn.execute("PRAGMA synchronous = NORMAL")
    if 0 < pages < wal_pages:
        conn.execute(f"PRAGMA wal_autocheckpoint = {wal_pages}")
    try:
        yield restore
    finally:
        restore()
