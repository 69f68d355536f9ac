-- The score.computed events that came in by `agentledger import`, whatever ledger
-- the export named (an export can name this ledger itself). Such a score was not
-- computed here: no sidecar is written from it, and the next scoring pass scores
-- that iteration from its inputs here (ledger/scoring_pass.py). Not derived from
-- the events (like event_origins): `rebuild` keeps it.
CREATE TABLE imported_scores (
    seq INTEGER PRIMARY KEY
) STRICT;
INSERT INTO imported_scores (seq)
SELECT o.seq FROM event_origins o JOIN events e ON e.seq = o.seq WHERE e.type = 'score.computed';
