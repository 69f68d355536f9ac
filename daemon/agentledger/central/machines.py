"""The team ledger's roles: one PostgreSQL login role per shipping machine and per
reader, made by the admin (``agentledger central add-machine NAME`` /
``add-reader NAME``).

The password is made here, sent to the server only as a SCRAM verifier (libpq
computes it; the server's statement log never sees the password), and given back
once, as the one ``~/.pgpass`` line the machine needs: never inside a URL, never
logged. What each role may do is the server's business (central migration 4).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from .connect import CentralError

KINDS = {"machine": "agentledger_machine", "reader": "agentledger_reader"}
# what a reader's role carries on the server (central/read.py reads them back and never
# lifts them): a statement, a wait for a lock, a transaction left idle; and how many
# sessions it may hold at once, so that readers cannot take the server's connections
READER_LIMITS = {"statement_timeout": "60s", "lock_timeout": "5s", "idle_in_transaction_session_timeout": "60s"}
READER_CONNECTIONS = 8
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass
class Added:
    role: str
    kind: str
    url: str  # for [[ship]] url or query --central: no password in it
    pgpass: str  # host:port:database:role:password
    ledgers: list[str] = field(default_factory=list)  # ledger ids bound to the role


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise CentralError(f"not a role name: {name!r} (lower-case letters, digits and _, at most 63, not starting"
                           " with a digit)")
    return name


def _pgpass_field(text: str) -> str:
    return text.replace("\\", "\\\\").replace(":", "\\:")


def add(pg, name: str, kind: str, *, ledgers: list[str] | None = None) -> Added:
    """Create the login role ``name`` in the group of ``kind``; for a machine, bind
    ``ledgers`` (default: the unclaimed ledgers that shipped under the name ``name``
    before roles existed). Runs in the caller's transaction, as the admin."""
    from psycopg import sql

    check_name(name)
    if pg.execute("SELECT to_regrole(%s) IS NOT NULL", (name,)).fetchone()[0]:
        raise CentralError(f"a role named {name!r} exists already on this server: choose another name")
    password = secrets.token_urlsafe(24)
    verifier = pg.pgconn.encrypt_password(password.encode(), name.encode(), b"scram-sha-256").decode()
    pg.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
        sql.Identifier(name), sql.Literal(verifier), sql.Identifier(KINDS[kind])))
    if kind == "reader":
        pg.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT {}").format(sql.Identifier(name),
                                                                       sql.Literal(READER_CONNECTIONS)))
        for setting, value in READER_LIMITS.items():
            pg.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(sql.Identifier(name), sql.Identifier(setting),
                                                                   sql.Literal(value)))
    pg.execute("INSERT INTO agentledger.machines (role, kind) VALUES (%s, %s)", (name, kind))
    bound: list[str] = []
    if kind == "machine":
        if ledgers is None:
            ledgers = [r[0] for r in pg.execute(
                "SELECT l.ledger_id::text FROM agentledger.ledgers l LEFT JOIN agentledger.ledger_roles r"
                " USING (ledger_id) WHERE l.name = %s AND r.role IS NULL ORDER BY 1", (name,))]
        for lid in ledgers:
            pg.execute("INSERT INTO agentledger.ledger_roles (ledger_id, role) VALUES (%s, %s)"
                       " ON CONFLICT (ledger_id) DO NOTHING", (lid, name))
            owner = pg.execute("SELECT role FROM agentledger.ledger_roles WHERE ledger_id = %s", (lid,)).fetchone()[0]
            if owner != name:
                raise CentralError(f"ledger {lid} belongs to machine {owner} already")
            bound.append(lid)
    info = pg.info
    host, port, db = info.host, info.port, info.dbname
    if host.startswith("/"):
        url = f"postgresql://{name}@/{db}?host={host}&port={port}"
    else:
        url = f"postgresql://{name}@{'[' + host + ']' if ':' in host else host}:{port}/{db}"
    pgpass = ":".join(_pgpass_field(str(v)) for v in (host, port, db, name, password))
    return Added(name, kind, url, pgpass, bound)


def listing(pg) -> list[dict]:
    """Each role made here: its kind and the ledgers bound to it (a reader has none)."""
    rows = pg.execute(
        "SELECT m.role::text, m.kind, m.created_at::text, coalesce(array_agg(r.ledger_id::text ORDER BY r.ledger_id)"
        " FILTER (WHERE r.ledger_id IS NOT NULL), '{}') FROM agentledger.machines m"
        " LEFT JOIN agentledger.ledger_roles r ON r.role = m.role GROUP BY 1, 2, 3 ORDER BY 2, 1").fetchall()
    return [{"role": role, "kind": kind, "created_at": at, "ledgers": list(lids)} for role, kind, at, lids in rows]
