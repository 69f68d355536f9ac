-- Migration 8: three views for reading rather than computing (Datasette's "start
-- here", `agentledger query`): scores rounded to three places, newest first. The
-- exact values stay in `latest_scores`, `signal_contributions` and the rest.
-- Columns are public, as in migration 5: add at the end, never rename or drop.

-- Every iteration's current score, the most recently closed first.
CREATE VIEW recent_scores AS
SELECT l.session_id, l.iteration, l.task_id, round(l.value, 3) AS score, l.band, l.rubric_version, i.date,
       l.scored_at, l.source
FROM latest_scores l LEFT JOIN iterations i ON i.source = l.source AND i.iteration = l.iteration
ORDER BY i.date DESC, l.iteration DESC;

-- One row per session, the one with the most recent iteration first: how many
-- iterations, the mean and range of their current scores, how many fell in each band.
CREATE VIEW session_overview AS
SELECT l.session_id, count(*) AS iterations, min(l.iteration) AS first_iteration,
       max(l.iteration) AS last_iteration, round(avg(l.value), 3) AS mean_score,
       round(min(l.value), 3) AS min_score, round(max(l.value), 3) AS max_score,
       sum(l.band = 'excellent') AS excellent, sum(l.band = 'good') AS good, sum(l.band = 'fair') AS fair,
       sum(l.band = 'poor') AS poor, group_concat(DISTINCT l.rubric_version) AS rubric_versions,
       max(l.scored_at) AS last_scored_at, l.source
FROM latest_scores l
WHERE l.session_id <> ''
GROUP BY l.source, l.session_id
ORDER BY max(l.iteration) DESC;

-- Per signal of the active rubric, over every iteration's score under it: how often
-- it was present, its mean sub-score, and the score it cost on average (weight × (1 − sub-score)).
CREATE VIEW signal_overview AS
SELECT c.signal, c.label, count(*) AS scores, sum(c.present) AS present,
       round(avg(CASE WHEN c.present THEN c.sub_score END), 3) AS mean_sub_score,
       round(avg(c.contribution), 3) AS mean_contribution,
       round(avg(CASE WHEN c.present THEN c.effective_weight * (1 - c.sub_score) ELSE 0 END), 3) AS mean_cost,
       c.rubric_version
FROM signal_contributions c
WHERE c.rubric_version = (SELECT value FROM ledger_state WHERE key = 'active_rubric')
GROUP BY c.signal
ORDER BY mean_cost DESC;
