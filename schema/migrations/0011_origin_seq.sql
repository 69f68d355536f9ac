-- Migration 11: an imported event's seq in the ledger that recorded it first.
--
-- The team ledger identifies an event by its origin and its seq there, (origin,
-- origin_seq): for events recorded here that is (this ledger, seq), an increasing
-- key, which the server indexes far more cheaply than (origin, idempotency_key),
-- whose keys are random. An import keeps the exported `origin_seq`; rows imported
-- before this migration, or from an export that has none, leave it NULL (the team
-- ledger then knows them by (origin, idempotency_key) alone, see docs/team.md).
ALTER TABLE event_origins ADD COLUMN origin_seq INTEGER;
