-- Migration 4: annotated trajectories (Markdown + YAML front matter).
--
-- Every table is a projection of `annotation.recorded` / `file.removed`
-- events (rebuild reproduces them); a file is keyed by (source, path) since
-- one taskId recurs across runs. Declared and derived computed fields sit
-- side by side; disagreements are findings, not errors.
CREATE TABLE trajectories (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    sha256          TEXT    NOT NULL,
    format_version  TEXT    NOT NULL,   -- v1 | v2 | v3 | off-format
    task_id         TEXT,
    title_id        TEXT,               -- the id in "# Trajectory: <id>"
    score           REAL,               -- as written
    score_norm      REAL,               -- score/100 when written as a percentage (> 1)
    iterations      INTEGER,
    wall_time_ms    INTEGER,
    answer_type     TEXT,
    task_group      TEXT,
    answer          TEXT,
    expected        TEXT,
    error           TEXT,
    failure_mode    TEXT,
    verdict         TEXT,
    frontmatter     TEXT    NOT NULL CHECK (json_valid(frontmatter)),  -- every key, known or not
    extra           TEXT    NOT NULL CHECK (json_valid(extra)),        -- the keys the format does not define
    control_flow_lines        INTEGER NOT NULL,
    control_flow_lines_parsed INTEGER NOT NULL,
    outcome_strip   TEXT    NOT NULL,   -- one of ✓ ✗ ~ → ? · per iteration line
    hypothesis_arc  TEXT,
    problems        INTEGER NOT NULL,   -- format problems + disagreements + verdict findings
    verdict_findings TEXT   NOT NULL CHECK (json_valid(verdict_findings)),
    seq             INTEGER NOT NULL,
    PRIMARY KEY (source, path)
) STRICT;
CREATE INDEX trajectories_by_task ON trajectories (task_id);

CREATE TABLE trajectory_lines (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    ordinal         INTEGER NOT NULL,
    line_no         INTEGER NOT NULL,   -- in the file
    kind            TEXT    NOT NULL,   -- iter | child | ellipsis | marker | unparsed
    iter_from       INTEGER,
    iter_to         INTEGER,
    iter_approx     INTEGER NOT NULL,
    delegation_id   TEXT,
    parent_ordinal  INTEGER,
    phase_raw       TEXT,
    phase           TEXT,
    subphase        TEXT,
    tags            TEXT    NOT NULL,   -- JSON array
    hyp_ids         TEXT    NOT NULL,   -- JSON array
    marker_raw      TEXT,
    outcome         TEXT,               -- success | failure | partial | neutral | unknown
    description     TEXT    NOT NULL,
    pseudo          INTEGER NOT NULL,
    PRIMARY KEY (source, path, ordinal)
) STRICT;

CREATE TABLE trajectory_hypotheses (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    ordinal         INTEGER NOT NULL,
    line_no         INTEGER NOT NULL,
    hid             TEXT    NOT NULL,
    hypothesis      TEXT    NOT NULL,
    iters_raw       TEXT    NOT NULL,
    iters           TEXT,               -- JSON array of iteration numbers, NULL when not numeric
    outcome         TEXT    NOT NULL,   -- first word, lower case: rejected | accepted | abandoned | superseded | …
    outcome_note    TEXT    NOT NULL,
    superseded_by   TEXT,
    evidence        TEXT    NOT NULL,
    PRIMARY KEY (source, path, ordinal)
) STRICT;

CREATE TABLE trajectory_delegations (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    ordinal         INTEGER NOT NULL,
    did             TEXT,
    iters_used      INTEGER,
    row             TEXT    NOT NULL CHECK (json_valid(row)),  -- every cell by header name
    PRIMARY KEY (source, path, ordinal)
) STRICT;

CREATE TABLE trajectory_resources (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    resource        TEXT    NOT NULL,
    col             TEXT    NOT NULL,
    raw_value       TEXT    NOT NULL
) STRICT;
CREATE INDEX trajectory_resources_by_path ON trajectory_resources (source, path);

CREATE TABLE trajectory_sections (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    ordinal         INTEGER NOT NULL,
    heading         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    PRIMARY KEY (source, path, ordinal)
) STRICT;

CREATE TABLE trajectory_fields (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    name            TEXT    NOT NULL,   -- hypothesesTested, itersExplore, …
    declared        TEXT,               -- JSON of the front matter's value (NULL: not declared)
    derived         TEXT,               -- JSON of ours (NULL: nothing to derive it from)
    agrees          INTEGER,            -- 1/0; NULL when one side is missing
    PRIMARY KEY (source, path, name)
) STRICT;

-- Open vocabularies: seed terms from the format, plus every coined term seen.
CREATE TABLE trajectory_terms (
    source          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    vocabulary      TEXT    NOT NULL,   -- pattern | failure_mode
    term            TEXT    NOT NULL,
    PRIMARY KEY (source, path, vocabulary, term)
) STRICT;
CREATE INDEX trajectory_terms_by_term ON trajectory_terms (vocabulary, term);

CREATE TABLE vocabulary_seeds (
    vocabulary      TEXT    NOT NULL,
    term            TEXT    NOT NULL,
    category        TEXT    NOT NULL,
    PRIMARY KEY (vocabulary, term)
) STRICT;

-- Each term with its use count; seed terms appear even when unused.
CREATE VIEW vocabulary AS
SELECT v.vocabulary, v.term, max(v.seed) AS seed, max(v.category) AS category,
       (SELECT count(*) FROM trajectory_terms t WHERE t.vocabulary = v.vocabulary AND t.term = v.term) AS uses
FROM (SELECT vocabulary, term, 1 AS seed, category FROM vocabulary_seeds
      UNION ALL SELECT DISTINCT vocabulary, term, 0, NULL FROM trajectory_terms) v
GROUP BY v.vocabulary, v.term;

-- "Which patterns occur most, per task group and verdict?"
CREATE VIEW pattern_frequency AS
SELECT tr.task_group, tr.verdict, t.term AS pattern, count(*) AS trajectories
FROM trajectory_terms t JOIN trajectories tr USING (source, path)
WHERE t.vocabulary = 'pattern'
GROUP BY tr.task_group, tr.verdict, t.term;

-- "Which failure modes are most common, per task group?"
CREATE VIEW failure_mode_ranking AS
SELECT task_group, failure_mode, count(*) AS trajectories,
       round(1.0 * count(*) / sum(count(*)) OVER (PARTITION BY task_group), 4) AS share_of_group
FROM trajectories WHERE failure_mode IS NOT NULL
GROUP BY task_group, failure_mode;

-- "How many hypotheses before the accepted one?" (log order; NULL when none accepted)
CREATE VIEW hypotheses_before_breakthrough AS
SELECT tr.source, tr.path, tr.task_id, tr.task_group, tr.verdict,
       (SELECT min(h.ordinal) - 1 FROM trajectory_hypotheses h
        WHERE h.source = tr.source AND h.path = tr.path AND h.outcome = 'accepted') AS hypotheses_before,
       (SELECT count(*) FROM trajectory_hypotheses h WHERE h.source = tr.source AND h.path = tr.path) AS hypotheses
FROM trajectories tr
WHERE EXISTS (SELECT 1 FROM trajectory_hypotheses h WHERE h.source = tr.source AND h.path = tr.path);

CREATE VIEW hypotheses_before_breakthrough_distribution AS
SELECT hypotheses_before, count(*) AS trajectories
FROM hypotheses_before_breakthrough GROUP BY hypotheses_before;

-- Derived per-file shares of iterations: wasted, and on ultimately rejected hypotheses.
CREATE VIEW iteration_shares AS
SELECT tr.source, tr.path, tr.task_id, tr.task_group, tr.verdict, tr.iterations,
       CAST(json_extract(w.derived, '$') AS INTEGER) AS iters_wasted,
       CAST(json_extract(r.derived, '$') AS INTEGER) AS iters_on_rejected_hypotheses,
       round(1.0 * json_extract(w.derived, '$') / nullif(tr.iterations, 0), 4) AS wasted_share,
       round(1.0 * json_extract(r.derived, '$') / nullif(tr.iterations, 0), 4) AS rejected_share
FROM trajectories tr
LEFT JOIN trajectory_fields w ON w.source = tr.source AND w.path = tr.path AND w.name = 'itersWasted'
LEFT JOIN trajectory_fields r ON r.source = tr.source AND r.path = tr.path AND r.name = 'itersOnRejectedHypotheses'
WHERE tr.format_version <> 'off-format';

-- Share of iteration numbers per coarse phase, over all parsed iteration lines
-- (an iteration listed under two phases counts under both; pseudo lines do not count).
CREATE VIEW phase_iteration_share AS
WITH RECURSIVE span (source, path, phase, it, hi) AS (
    SELECT source, path, phase, min(iter_from, coalesce(iter_to, iter_from)),
           max(iter_from, coalesce(iter_to, iter_from))
    FROM trajectory_lines
    WHERE kind = 'iter' AND pseudo = 0 AND phase IS NOT NULL AND iter_from IS NOT NULL
    UNION ALL
    SELECT source, path, phase, it + 1, hi FROM span WHERE it < hi
), its AS (SELECT DISTINCT source, path, phase, it FROM span)
SELECT phase, count(*) AS iterations, round(1.0 * count(*) / (SELECT count(*) FROM its), 4) AS share
FROM its GROUP BY phase;

-- Declared vs derived agreement per computed field, over every file that declares it.
CREATE VIEW computed_field_agreement AS
SELECT name, count(*) AS declared, sum(agrees) AS agree,
       round(1.0 * sum(agrees) / count(*), 4) AS agreement
FROM trajectory_fields WHERE declared IS NOT NULL AND agrees IS NOT NULL
GROUP BY name;
