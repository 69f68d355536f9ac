-- The latest score of an iteration is its score under the active rubric (the last
-- rubric.activated, kept in ledger_state), not the newest row across rubric
-- versions: a switch back to a rubric whose scores exist appends no score, and
-- the newest rows then belonged to the rubric switched away from. The team
-- ledger's score_latest is defined the same way (central migration 4), and
-- tests/test_central_parity.py holds the two to it.
DROP VIEW latest_scores;
CREATE VIEW latest_scores AS
SELECT s.source, s.iteration, i.session_id, i.task_id, s.rubric_version, s.scored, s.value, s.band,
       s.inputs_hash, e.recorded_at AS scored_at, s.seq, s.sidecar
FROM scores s
JOIN events e ON e.seq = s.seq
LEFT JOIN iterations i ON i.source = s.source AND i.iteration = s.iteration
WHERE s.rubric_version = (SELECT value FROM ledger_state WHERE key = 'active_rubric');
