-- Migration 10: events that came from another ledger.
--
-- `agentledger import` of another ledger's export (or of this ledger's own export
-- into a fresh file) appends events this ledger did not record first. The team
-- ledger identifies an event by (origin, idempotency_key), so such events must keep
-- the id of the ledger that recorded them: shipped again from here they are then
-- recognised, not duplicated. Events recorded here have no row (their origin is
-- this ledger). A fact about events, like them never rewritten; not a projection.
CREATE TABLE event_origins (
    seq    INTEGER PRIMARY KEY,
    origin TEXT    NOT NULL
) STRICT;
