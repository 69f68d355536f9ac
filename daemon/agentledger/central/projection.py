"""The team ledger's projections, kept in ``schema/central/projection.sql`` as one
server function, ``agentledger.project``: the shipper calls it in the transaction
that adds a batch's events, and the server (not the client) decides what it may
touch. The local ledger's counterpart is ``store/``; a parity test replays the same
events through both (tests/test_central_parity.py)."""

from __future__ import annotations

import functools
import hashlib

from ..paths import schema_dir

NAME = "projection"


@functools.cache
def source() -> str:
    """The file's text, read once per process (each connection asks whether it changed)."""
    return (schema_dir() / "central" / "projection.sql").read_text("utf-8")


@functools.cache
def sha256() -> str:
    return hashlib.sha256(source().encode()).hexdigest()


def install(conn) -> None:
    """(Re)install the function; the caller holds the migration lock and transaction."""
    conn.execute(source())
    conn.execute("INSERT INTO agentledger.installed_code (name, sha256) VALUES (%s, %s) ON CONFLICT (name)"
                 " DO UPDATE SET sha256 = excluded.sha256, installed_at = now()", (NAME, sha256()))


def project(cur, ledger_id: str, lo: int, hi: int, types: set[str]) -> None:
    """Bring the projections up to date with the server's events of ``ledger_id`` in (lo, hi]."""
    cur.execute("SELECT agentledger.project(%s, %s, %s, %s)", (ledger_id, lo, hi, sorted(types)))


def reproject_all(conn) -> int:
    """Every ledger's projections from all of its events (after the upgrade to migration
    4, which moved the projections here): idempotent, and it keeps each ledger's
    last-shipped time. Returns how many ledgers it went over."""
    types = [t for (t,) in conn.execute("SELECT DISTINCT type FROM agentledger.events")]
    ledgers = conn.execute("SELECT e.ledger_id, max(e.seq), l.last_shipped_at FROM agentledger.events e"
                           " JOIN agentledger.ledgers l USING (ledger_id) GROUP BY e.ledger_id, l.last_shipped_at"
                           ).fetchall()
    for lid, top, shipped_at in ledgers:
        conn.execute("SELECT agentledger.project(%s, 0, %s, %s)", (lid, top, types))
        conn.execute("UPDATE agentledger.ledgers SET last_shipped_at = %s WHERE ledger_id = %s", (shipped_at, lid))
    return len(ledgers)
