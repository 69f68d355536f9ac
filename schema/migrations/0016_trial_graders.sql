-- vally's report.md figures for each trial (trial.completed v2): the trajectory's wall
-- time (what report.md calls the duration), its total tokens, and how many of the
-- trial's top-level graders passed; one row per grader in `trial_graders`. Trials
-- recorded before this version have NULL here (v1 events did not keep them).
ALTER TABLE trials ADD COLUMN wall_time_ms INTEGER;
ALTER TABLE trials ADD COLUMN total_tokens INTEGER;
ALTER TABLE trials ADD COLUMN graders_passed INTEGER;
ALTER TABLE trials ADD COLUMN graders_total INTEGER;

CREATE TABLE trial_graders (
    source   TEXT    NOT NULL,
    run_dir  TEXT    NOT NULL,
    item_id  TEXT    NOT NULL,
    ordinal  INTEGER NOT NULL,   -- the grader's place in gradeResult.details
    name     TEXT    NOT NULL,
    passed   INTEGER,            -- NULL: the grader did not say
    score    REAL,
    PRIMARY KEY (source, run_dir, item_id, ordinal)
) STRICT;
