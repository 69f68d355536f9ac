"""Schema migrations: ``schema/migrations/NNNN_name.sql``, applied in order.

sqlite-utils' ``Migrations`` records what ran (``_sqlite_migrations``) and
wraps each migration in a transaction; ``PRAGMA user_version`` mirrors the
count so that opening an up-to-date ledger costs one pragma read and never
imports sqlite-utils (it is on the close-task hook's path). A new ledger does
import it (``sqlite_utils_module``), first thing in a cold ingest.
"""

from __future__ import annotations

import sqlite3
from functools import cache
from pathlib import Path

from ..paths import schema_dir


@cache
def migration_files() -> tuple[Path, ...]:
    return tuple(sorted((schema_dir() / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql")))


def split_statements(sql: str) -> list[str]:
    """Split a script into statements (triggers contain ';' inside BEGIN … END)."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()):
        raise ValueError("incomplete SQL statement at end of migration")
    return out


def sqlite_utils_module():
    """sqlite-utils, imported without numpy when nothing here has imported numpy yet.

    sqlite-utils imports numpy whenever it is installed (scipy, for the statistics
    commands, installs it), only to store numpy values; the ledger never hands it any.
    That import was ~75 ms of the ~165 ms sqlite-utils took to import, spent before a
    cold ingest's first file is read. numpy is still imported normally by whatever
    asks for it later (``import numpy`` is only barred while sqlite-utils loads)."""
    import sys

    if "sqlite_utils" in sys.modules or "numpy" in sys.modules:
        import sqlite_utils

        return sqlite_utils
    sys.modules["numpy"] = None  # type: ignore[assignment]  # `import numpy` raises ImportError meanwhile
    try:
        import sqlite_utils
    finally:
        if sys.modules.get("numpy", 0) is None:
            del sys.modules["numpy"]
    return sqlite_utils


def ensure_latest(conn: sqlite3.Connection) -> int:
    files = migration_files()
    if conn.execute("PRAGMA user_version").fetchone()[0] >= len(files):
        return 0
    sqlite_utils = sqlite_utils_module()
    from sqlite_utils.migrations import Migrations

    migrations = Migrations("agentledger")
    for number, path in enumerate(files, start=1):
        def apply(db: sqlite_utils.Database, path: Path = path, number: int = number) -> None:
            for statement in split_statements(path.read_text("utf-8")):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {number}")

        migrations(name=path.stem)(apply)
    db = sqlite_utils.Database(conn)
    pending = len(migrations.pending(db))
    try:
        migrations.apply(db)
    except sqlite3.OperationalError:
        # Another process may have migrated the same new ledger a moment ago.
        if conn.execute("PRAGMA user_version").fetchone()[0] < len(files):
            raise
    if pending:
        # each migration commits its own rewrite of the schema's pages: a new ledger's WAL
        # held ~3.8 MB of them, for a database of 1.4 MB, until its first checkpoint: room a
        # nearly full disk may not have then (tests/test_daemon.py: the full disk test)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return pending
