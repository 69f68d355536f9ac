-- Migration 5: query views with stable, documented names and columns.
--
-- For people and dashboards (Datasette, `agentledger query`): no event-schema
-- knowledge needed. snake_case columns; timestamps are ISO-8601 UTC strings
-- (the `recorded_at` of the event that produced the row). Column lists are part
-- of the public interface: add columns at the end, never rename or drop.

-- The most recent score of each iteration (any rubric version; after a backfill,
-- the active one), with what it was about.
CREATE VIEW latest_scores AS
SELECT s.source, s.iteration, i.session_id, i.task_id, s.rubric_version, s.scored, s.value, s.band,
       s.inputs_hash, e.recorded_at AS scored_at, s.seq, s.sidecar
FROM scores s
JOIN events e ON e.seq = s.seq
LEFT JOIN iterations i ON i.source = s.source AND i.iteration = s.iteration
WHERE s.seq = (SELECT max(s2.seq) FROM scores s2 WHERE s2.source = s.source AND s2.iteration = s.iteration);

-- Every score ever computed, one row per score.computed event: rescoring under the
-- same rubric (new evidence) and rubric bumps both show up here.
CREATE VIEW score_history AS
SELECT e.source, CAST(json_extract(e.payload, '$.iteration') AS INTEGER) AS iteration,
       json_extract(e.payload, '$.rubric_version') AS rubric_version,
       json_extract(e.payload, '$.scored') AS scored,
       CASE WHEN json_type(e.payload, '$.value') IN ('real', 'integer') THEN json_extract(e.payload, '$.value') END
           AS value,
       json_extract(e.payload, '$.band') AS band,
       json_extract(e.payload, '$.inputs_hash') AS inputs_hash,
       e.recorded_at AS scored_at, e.seq
FROM events e WHERE e.type = 'score.computed';

-- One row per signal of each current score (per rubric version): what it added.
CREATE VIEW signal_contributions AS
SELECT s.source, s.iteration, s.rubric_version, json_extract(r.value, '$.signal') AS signal,
       json_extract(r.value, '$.label') AS label, json_extract(r.value, '$.present') AS present,
       json_extract(r.value, '$.sub_score') AS sub_score,
       json_extract(r.value, '$.nominal_weight') AS nominal_weight,
       json_extract(r.value, '$.effective_weight') AS effective_weight,
       json_extract(r.value, '$.contribution') AS contribution,
       json_extract(r.value, '$.detail') AS detail, e.recorded_at AS scored_at
FROM scores s JOIN events e ON e.seq = s.seq, json_each(e.payload, '$.breakdown') AS r;

-- Integrity track: what a role claimed against what was observed, per signal.
CREATE VIEW integrity_deltas AS
SELECT s.source, s.iteration, s.rubric_version, json_extract(p.value, '$.role') AS role,
       json_extract(p.value, '$.signal') AS signal, json_extract(p.value, '$.comparable') AS comparable,
       json_extract(p.value, '$.claimed.present') AS claimed_present,
       json_extract(p.value, '$.claimed.sub_score') AS claimed_sub_score,
       json_extract(p.value, '$.observed.present') AS observed_present,
       json_extract(p.value, '$.observed.sub_score') AS observed_sub_score,
       json_extract(p.value, '$.delta') AS delta,
       json_extract(p.value, '$.claimed.detail') AS claimed_detail,
       json_extract(p.value, '$.observed.detail') AS observed_detail, e.recorded_at AS scored_at
FROM scores s JOIN events e ON e.seq = s.seq, json_each(e.payload, '$.integrity') AS p;

CREATE VIEW integrity_by_role AS
SELECT rubric_version, role, signal, count(*) AS pairs, sum(comparable) AS comparable,
       round(avg(CASE WHEN comparable THEN delta END), 4) AS mean_delta,
       sum(comparable AND delta < 0) AS over_claims, sum(comparable AND delta > 0) AS under_claims
FROM integrity_deltas GROUP BY rubric_version, role, signal;

CREATE VIEW session_scores AS
SELECT source, session_id, rubric_version, json_array_length(iterations) AS iterations, scored, value, band,
       sidecar
FROM sessions;

CREATE VIEW open_quarantine AS
SELECT q.source, q.path, q.kind, q.line, q.col, q.byte_offset, q.reason, e.recorded_at AS quarantined_at, q.seq
FROM quarantine q JOIN events e ON e.seq = q.seq WHERE q.resolved_seq IS NULL;

CREATE VIEW quarantine_summary AS
SELECT source, kind, sum(resolved_seq IS NULL) AS open, sum(resolved_seq IS NOT NULL) AS resolved,
       count(*) AS total
FROM quarantine GROUP BY source, kind;

CREATE VIEW run_summaries AS
SELECT r.source, r.run_dir, r.run_id, r.kind, r.experiment, r.variant, r.trials, r.passed, r.errors,
       round(1.0 * r.passed / nullif(r.trials, 0), 4) AS pass_rate, r.complete, e.recorded_at AS updated_at
FROM runs r LEFT JOIN events e ON e.seq = r.seq;

CREATE VIEW trial_pass_rates_by_model AS
SELECT eval_name, model, count(*) AS trials, sum(passed) AS passed,
       round(1.0 * sum(passed) / count(*), 4) AS pass_rate, count(DISTINCT run_dir) AS runs
FROM trials GROUP BY eval_name, model;

-- Per file a source has read: position at the last read and how far behind the file's
-- size was then (`agentledger status` also stats the files now); when it last produced an event.
CREATE VIEW source_lag AS
SELECT c.source, s.kind AS source_kind, c.path, c.kind, c.byte_offset, c.size AS size_at_read,
       CASE WHEN c.kind IN ('jsonl', 'jsonl+turns') THEN max(c.size - c.byte_offset, 0) END AS lag_bytes_at_read,
       c.last_seq, e.recorded_at AS last_event_at
FROM source_checkpoints c
LEFT JOIN sources s ON s.source = c.source
LEFT JOIN events e ON e.seq = c.last_seq;
