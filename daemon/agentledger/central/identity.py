"""A new id for a ledger that shares its id with another one.

A ledger file copied to a second machine (in a machine image, say), or restored
from an older copy, keeps its id; the team ledger then finds other events at this
ledger's seqs and the shipper stops (ship.CLASH). The way out is a new id for this
ledger. Its events split in two: those the server already holds under the old id
with the same idempotency key were recorded before the copy, by the old ledger,
and stay the old ledger's (an ``event_origins`` row: origin the old id, origin seq
their seq, so that they are recognised, not shipped twice); every other event is
this ledger's own and ships under the new id. The cursors go, since nothing has
been shipped under the new id yet.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from dataclasses import dataclass

from .ship import ledger_identity

PAGE = 10_000


@dataclass
class NewIdentity:
    old: str
    new: str
    kept: int  # events that stay the old ledger's (the server holds them under it)


def new_identity(local: sqlite3.Connection, pg) -> NewIdentity:
    """Give ``local`` a new id, reading from the team ledger ``pg`` which of its events
    the old id's ledger recorded. Call it inside one local write transaction (the
    caller's: ``store.db.write_transaction``); nothing on the server changes."""
    old = ledger_identity(local)
    new, kept, after = str(uuid.uuid4()), 0, 0
    while True:  # a page of the server's events under the old id at a time: memory stays flat
        page = pg.execute("SELECT seq, idempotency_key FROM agentledger.events WHERE ledger_id = %s AND seq > %s"
                          " ORDER BY seq LIMIT %s", (old, after, PAGE)).fetchall()
        if not page:
            break
        after = page[-1][0]
        same = local.execute(
            "SELECT e.seq FROM events e JOIN json_each(?) s ON e.seq = s.value ->> 0"
            " AND e.idempotency_key = s.value ->> 1 WHERE e.seq NOT IN (SELECT seq FROM event_origins)",
            (json.dumps([[seq, key] for seq, key in page]),)).fetchall()
        local.executemany("INSERT INTO event_origins (seq, origin, origin_seq) VALUES (?, ?, ?)",
                          [(seq, old, seq) for (seq,) in same])
        kept += len(same)
    local.execute("UPDATE ledger_identity SET ledger_id = ?", (new,))
    local.execute("DELETE FROM ship_cursors")
    return NewIdentity(old, new, kept)

