"""The team ledger's schema: versioned migrations (``schema/central/NNNN_*.sql``)
applied in order inside one transaction, under an advisory lock so that many
shippers starting at once apply each migration exactly once.

``projection.sql`` (the projections, as a function: central/projection.py) is
installed beside them, and again whenever its text changes.

Only the admin (the schema's owner) migrates: a machine or reader role that finds
the schema behind is told to have the admin run ``agentledger central init``.

Everything lives in the PostgreSQL schema ``agentledger``;
``agentledger.schema_version`` says which migrations ran and which program made
them. A database whose ``agentledger`` schema was made by something else, or by a
newer agentledger (a migration this one does not know), is refused with one line:
shipping into a layout this code does not understand could only corrupt it.
"""

from __future__ import annotations

from pathlib import Path

from ..paths import schema_dir
from .connect import CentralError, describe

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
    import psycopg

    known = migration_files()
    files = known[:upto]
    with conn.transaction():
        found = current_version(conn)
        if found is not None and found[1] == APP and len(files) <= found[0] <= len(known) and (
                not _code_changed(conn, upto=upto) or not _may_migrate(conn, False)):
            return 0  # nothing this role can do, and no lock taken: a shipper's every pass comes here
        # Something to do: under the lock (an advisory one, which any role may take: a
        # reader holding it delays an upgrade, never a shipper, which takes it only here)
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
        pending = files[done:]
        if (pending or _code_changed(conn, upto=upto)) and not _may_migrate(conn, found is None):
            if not pending:
                return 0  # the admin's next `central init` installs the new projection code
            raise CentralError(f"the team ledger's schema is at version {done} and this agentledger needs"
                               f" {len(known)}: the admin upgrades it with `agentledger central init ADMIN_URL`")
        for number, path in enumerate(pending, start=done + 1):
            try:
                with conn.transaction():
                    conn.execute(path.read_text("utf-8"))
            except psycopg.errors.InsufficientPrivilege as exc:
                raise CentralError(f"migration {path.stem} needs the admin (the schema's owner, with CREATEROLE or"
                                   f" superuser): {describe(exc)}") from None
            conn.execute("INSERT INTO agentledger.schema_version (version, app, name) VALUES (%s, %s, %s)",
                         (number, APP, path.stem))
        if _code_changed(conn, upto=upto):
            from . import projection

            projection.install(conn)
            if done < 4 <= len(files):  # the projections moved into the server's function: derive them again
                projection.reproject_all(conn)
        return max(0, len(files) - done)


def _may_migrate(conn, fresh: bool) -> bool:
    """Whether this role can change the schema: create it (fresh), or own it."""
    if fresh:
        return conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()[0]
    return conn.execute("SELECT pg_has_role(current_user, nspowner, 'USAGE') FROM pg_namespace"
                        " WHERE nspname = 'agentledger'").fetchone()[0]


def _code_changed(conn, *, upto: int | None) -> bool:
    """Whether projection.sql differs from what the server has (from migration 4 on)."""
    from .projection import sha256

    if upto is not None and upto < 4:
        return False
    if conn.execute("SELECT to_regclass('agentledger.installed_code') IS NULL").fetchone()[0]:
        return False  # migration 4 is still to run: it comes first
    row = conn.execute("SELECT sha256 FROM agentledger.installed_code WHERE name = 'projection'").fetchone()
    return row is None or row[0] != sha256()
