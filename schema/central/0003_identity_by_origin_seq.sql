-- Team ledger (PostgreSQL), migration 3.
--
-- An event is identified by the ledger that recorded it first and its seq there:
-- (origin, origin_seq), where origin_seq is NULL for an event shipped by the ledger
-- that recorded it (its seq is then the one) and carried by the local ledger for an
-- imported one (`agentledger import` keeps it from the export). For every event a
-- ledger records itself that key increases, so its index grows at one end, like the
-- primary key's; the unique index on (origin, idempotency_key) it replaces took a
-- random leaf page per event, a tenth of the server's work for a batch
-- (bench/bench_ship.py). Only imported events, a small minority, keep that index:
-- it recognises two imports of one event when one of them has no origin_seq
-- (imported before it was kept).
ALTER TABLE agentledger.events ADD COLUMN IF NOT EXISTS origin_seq bigint;
CREATE UNIQUE INDEX IF NOT EXISTS events_identity ON agentledger.events (origin, coalesce(origin_seq, seq))
    WHERE origin = ledger_id OR origin_seq IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS events_imported ON agentledger.events (origin, idempotency_key)
    WHERE origin <> ledger_id;
ALTER TABLE agentledger.events DROP CONSTRAINT IF EXISTS events_origin_idempotency_key_key;

COMMENT ON COLUMN agentledger.events.origin_seq IS
    'for an imported event (origin <> ledger_id): its seq in the origin ledger, NULL if it was imported'
    ' without it; NULL for an event its own ledger shipped (seq is the one)';
