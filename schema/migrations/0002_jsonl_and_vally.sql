-- Migration 2: tailed JSONL files (line numbers in checkpoints) and the vally source.

-- Number of complete lines consumed before byte_offset (for quarantine positions).
ALTER TABLE source_checkpoints ADD COLUMN line_no INTEGER NOT NULL DEFAULT 0;

-- A vally run: one directory holding a results.jsonl (a plain eval, or one
-- variant of an experiment; experiment variants share run_id).
CREATE TABLE runs (
    source      TEXT    NOT NULL,
    run_dir     TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    kind        TEXT    NOT NULL,          -- eval | experiment
    experiment  TEXT    NOT NULL,
    variant     TEXT    NOT NULL,
    trials      INTEGER NOT NULL,
    passed      INTEGER NOT NULL,
    errors      INTEGER NOT NULL,
    complete    INTEGER NOT NULL,          -- a run-summary arrived
    summary     TEXT    CHECK (summary IS NULL OR json_valid(summary)),
    seq         INTEGER NOT NULL,
    PRIMARY KEY (source, run_dir)
) STRICT;

-- One row per trial-result line (latest by itemId within a run).
CREATE TABLE trials (
    source             TEXT    NOT NULL,
    run_dir            TEXT    NOT NULL,
    item_id            TEXT    NOT NULL,
    run_id             TEXT    NOT NULL,
    eval_name          TEXT    NOT NULL,
    stimulus           TEXT    NOT NULL,
    model              TEXT    NOT NULL,
    variant            TEXT    NOT NULL,
    trial_index        INTEGER NOT NULL,
    status             TEXT    NOT NULL,
    duration_ms        INTEGER,
    grade_passed       INTEGER,
    grade_score        REAL,
    passed             INTEGER NOT NULL,   -- status = success AND gradeResult.passed
    input_tokens       INTEGER,
    output_tokens      INTEGER,
    cache_read_tokens  INTEGER,
    cache_write_tokens INTEGER,
    tool_calls         INTEGER,
    tool_errors        INTEGER,
    turns              INTEGER,
    raw_path           TEXT    NOT NULL,   -- the raw record: file, byte offset, length, sha256
    raw_offset         INTEGER NOT NULL,
    raw_length         INTEGER NOT NULL,
    raw_sha256         TEXT    NOT NULL,
    seq                INTEGER NOT NULL,
    PRIMARY KEY (source, run_dir, item_id)
) STRICT;
CREATE INDEX trials_by_eval ON trials (eval_name, model);

CREATE VIEW trial_pass_rates AS
SELECT eval_name, model, variant, run_dir,
       count(*) AS trials,
       sum(passed) AS passed,
       round(1.0 * sum(passed) / count(*), 4) AS pass_rate,
       sum(status = 'error') AS errors
FROM trials GROUP BY eval_name, model, variant, run_dir;

CREATE VIEW trial_token_use AS
SELECT eval_name, model, variant, run_dir,
       count(*) AS trials,
       sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens,
       sum(cache_read_tokens) AS cache_read_tokens,
       sum(cache_write_tokens) AS cache_write_tokens,
       sum(tool_calls) AS tool_calls,
       sum(tool_errors) AS tool_errors,
       round(avg(duration_ms)) AS mean_duration_ms
FROM trials GROUP BY eval_name, model, variant, run_dir;
