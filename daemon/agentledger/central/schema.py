"""The team ledger's schema: versioned migrations (``schema/central/NNNN_*.sql``)
applied in order inside one transaction, under an advisory lock so that many
shippers starting at once apply each migration exactly once.

Everything lives in the PostgreSQL schema ``agentledger``;
``agentledger.schema_version`` says which migrations ran and which program made
them. A database whose ``agentledger`` schema was made by something else, or by a
newer agentledger (a migration this one does not know), is refused with one line:
shipping into a layout this code does not understand could only corrupt it.
"""

from __future__ import annotations

from pathlib import Path

from ..paths import schema_dir
from .connect import CentralError

APP = "agentledger"
LOCK = 0x616C6564  # pg_advisory_xact_lock key: "aled"


def migration_files() -> list[Path]:
    return sorted((schema_dir() / "central").glob("[0-9][0-9][0-9][0-9]_*.sql"))


def current_version(conn) -> tuple[int, str] | None:
    """(version, app) recorded in the database, or None when it has no agentledger schema."""
    row = conn.execute("SELECT to_regclass('agentledger.schema_version') IS NOT NULL,"
                       " to_regnamespace('agentledger') IS NOT NULL").fetchone()
    if not row[0]:
        if row[1] and conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                                   " WHERE n.nspname = 'agentledger'").fetchone()[0]:
            raise CentralError("the database has an 'agentledger' schema that agentledger did not make")
        return None
    found = conn.execute("SELECT max(version), min(app) FROM agentledger.schema_version").fetchone()
    return (found[0] or 0, found[1] or APP)


def migrate(conn, *, upto: int | None = None) -> int:
    """Bring the database up to this version's schema (or to migration ``upto``);
    returns how many migrations ran. Commits (the connection must not be in
    autocommit mode)."""
    known = migration_files()
    files = known[:upto]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK,))
        found = current_version(conn)
        if found is not None and found[1] != APP:
            raise CentralError(f"the database's agentledger schema belongs to {found[1]!r}, not agentledger")
        done = found[0] if found else 0
        if done > len(known):
            raise CentralError(f"the database's team-ledger schema is version {done}, newer than this agentledger "
                               f"knows (1 to {len(known)}): upgrade agentledger on this machine")
        if found is None:
            conn.execute("CREATE SCHEMA IF NOT EXISTS agentledger")
            conn.execute("CREATE TABLE agentledger.schema_version (version integer PRIMARY KEY, app text NOT NULL,"
                         " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        for number, path in enumerate(files[done:], start=done + 1):
            conn.execute(path.read_text("utf-8"))
            conn.execute("INSERT INTO agentledger.schema_version (version, app, name) VALUES (%s, %s, %s)",
                         (number, APP, path.stem))
        return max(0, len(files) - done)
