-- Migration 3: turn-level facts from agent transcripts (Claude, Codex).
--
-- One row per transcript line that counts (a turn with token usage, or tool
-- results), keyed by its byte offset. Not the transcript itself: time, kind,
-- token counts and tool-result counts, which is all the rubric reads.
CREATE TABLE transcript_facts (
    source         TEXT    NOT NULL,   -- the transcript directory
    file           TEXT    NOT NULL,
    byte_offset    INTEGER NOT NULL,
    ts_ns          INTEGER NOT NULL,   -- UTC, nanoseconds since the epoch
    kind           TEXT    NOT NULL,   -- claude | codex
    input_tokens   INTEGER NOT NULL,
    output_tokens  INTEGER NOT NULL,
    cache_read     INTEGER NOT NULL,
    cache_creation INTEGER NOT NULL,
    turns          INTEGER NOT NULL,
    tool_results   INTEGER NOT NULL,
    tool_errors    INTEGER NOT NULL,
    seq            INTEGER NOT NULL,
    PRIMARY KEY (source, file, byte_offset)
) STRICT;
CREATE INDEX transcript_facts_by_time ON transcript_facts (source, ts_ns);

-- What the last scoring pass of each iteration-log source saw of git: the
-- trunk tip, to tell which iterations a trunk move can affect. Source state
-- (like checkpoints), not a projection: losing it only means one full pass.
CREATE TABLE git_state (
    source    TEXT PRIMARY KEY,
    trunk_tip TEXT
) STRICT;
