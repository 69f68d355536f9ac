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

-- What ingested events may have changed, for the next scoring pass: written in
-- the same transaction as the events, deleted after the pass that handled them,
-- so a crash between ingesting and scoring loses no work. A work queue (source
-- state, like checkpoints), not a projection: rebuild leaves it alone.
CREATE TABLE pending (
    id     INTEGER PRIMARY KEY,
    source TEXT    NOT NULL,
    kind   TEXT    NOT NULL,           -- iteration | artifact | transcript
    key    TEXT    NOT NULL,           -- iteration number, repo path, or transcript directory
    lo     INTEGER,                    -- transcript: earliest new fact time (ns)
    hi     INTEGER                     -- transcript: latest new fact time (ns)
) STRICT;
CREATE INDEX pending_by_source ON pending (source, kind);
