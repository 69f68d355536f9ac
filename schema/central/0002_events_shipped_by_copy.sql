-- Team ledger (PostgreSQL), migration 2.
--
-- events.ledger_id loses its foreign key to ledgers: the check ran once per row
-- shipped, a fifth of the server's work for a batch copied straight into events
-- (bench/bench_ship.py). The shipper registers its ledger (the INSERT ... ON
-- CONFLICT on ledgers) each time it connects, before it sends any event, so each
-- ledger_id in events still has its ledgers row; to forget a machine, delete its
-- events and its projection rows before its ledgers row (docs/team.md).
ALTER TABLE agentledger.events DROP CONSTRAINT IF EXISTS events_ledger_id_fkey;

-- The index on every event's type cost as much again. Only the scores are looked up
-- by type across ledgers (score_history); the projections find a batch's events by
-- (ledger_id, seq), and the quarantine's resolving event is the first one after it
-- in that ledger, both on the primary key.
DROP INDEX IF EXISTS agentledger.events_by_type;
CREATE INDEX IF NOT EXISTS events_scores ON agentledger.events (ledger_id, seq) WHERE type = 'score.computed';

-- A payload JSONB cannot hold (a NUL or a lone surrogate in a string) used to arrive
-- with no JSONB at all, which the projections cannot read. From now on its JSONB has
-- U+FFFD in those places, and payload_text keeps the exact text; rows shipped before
-- get the same where their only problem is a NUL (a lone surrogate stays as it was).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT ledger_id, seq, payload_text FROM agentledger.events WHERE payload IS NULL LOOP
        BEGIN
            -- \u0000 not itself escaped (an even number of backslashes before it)
            UPDATE agentledger.events
               SET payload = regexp_replace(r.payload_text, '(?<!\\)((\\\\)*)\\u0000', '\1\\ufffd', 'g')::jsonb
             WHERE ledger_id = r.ledger_id AND seq = r.seq;
        EXCEPTION WHEN untranslatable_character OR invalid_text_representation THEN
            NULL;
        END;
    END LOOP;
END $$;

COMMENT ON COLUMN agentledger.events.payload IS
    'the event''s payload; U+FFFD where the exact text (payload_text) has a NUL or a lone surrogate';
COMMENT ON COLUMN agentledger.events.payload_text IS
    'the exact payload text, only when JSONB cannot hold it (a NUL or a lone surrogate in a string)';
