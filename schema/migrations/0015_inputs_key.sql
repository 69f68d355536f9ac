-- The inputs key of a score: its inputs hash with the rubric left out (the
-- `inputs_key` of a `score.computed` payload). Two scores of one iteration under
-- different rubrics with one key were computed from the same inputs, so a switch
-- back to a rubric whose scores exist rewrites its sidecars without gathering or
-- scoring anything (ledger/rubrics.py). NULL for scores computed before this
-- version: those iterations are scored again at the next switch.
ALTER TABLE scores ADD COLUMN inputs_key TEXT;
UPDATE scores SET inputs_key = (SELECT json_extract(e.payload, '$.inputs_key') FROM events e WHERE e.seq = scores.seq);
