-- Migration 9: the ledger's identity, and how far it has been shipped.
--
-- A team ledger (PostgreSQL) merges many machines' events; each ledger is told
-- apart by a random UUID made once, here, when the ledger is created or first
-- migrated. Identity and cursors are neither events nor projections: `rebuild`
-- leaves them alone, and losing a cursor only means shipping again (the central
-- store ignores what it already has).
CREATE TABLE ledger_identity (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    ledger_id  TEXT    NOT NULL,
    created_at TEXT    NOT NULL
) STRICT;
INSERT INTO ledger_identity (singleton, ledger_id, created_at)
SELECT 1, lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-'
               || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(h, 18, 3) || '-' || substr(h, 21, 12)),
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM (SELECT hex(randomblob(16)) AS h);

-- Per destination (its name, or its URL without the password): the last seq the
-- server confirmed as committed. Advanced only after that commit.
CREATE TABLE ship_cursors (
    destination TEXT    PRIMARY KEY,
    last_seq    INTEGER NOT NULL,
    shipped_at  TEXT    NOT NULL
) STRICT;
