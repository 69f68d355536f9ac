-- agentledger ledger schema, migration 1.
--
-- `events` is the ledger: append-only (triggers refuse UPDATE and DELETE),
-- every row versioned (schema_version) and idempotent (idempotency_key).
-- `source_checkpoints` is what each source has read; it is written in the
-- same transaction as the events it explains. Every other table is a
-- projection: derived from events, dropped and replayed by `rebuild`.

CREATE TABLE events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    stream          TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL CHECK (schema_version >= 1),
    idempotency_key TEXT    NOT NULL UNIQUE,
    content_hash    TEXT    NOT NULL,
    occurred_at     TEXT,
    recorded_at     TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    source_path     TEXT,
    source_position TEXT,
    payload         TEXT    NOT NULL CHECK (json_valid(payload))
) STRICT;
CREATE INDEX events_by_stream ON events (stream, seq);
CREATE INDEX events_by_type ON events (type, seq);

CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE refused');
END;

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE refused');
END;

-- What each source last read of each file (stat + content hash; byte offset
-- and fingerprint for tailed files). Source state, not a projection.
CREATE TABLE source_checkpoints (
    source       TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    dev          INTEGER,
    ino          INTEGER,
    size         INTEGER,
    mtime_ns     INTEGER,
    content_hash TEXT,
    byte_offset  INTEGER NOT NULL DEFAULT 0,
    fingerprint  TEXT,
    last_seq     INTEGER,
    PRIMARY KEY (source, path)
) STRICT;

-- Configured sources as last seen (informational; config is the truth).
CREATE TABLE sources (
    source     TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    root       TEXT NOT NULL,
    repo       TEXT,
    trunk      TEXT,
    seen_at    TEXT NOT NULL
) STRICT;

-- ---------------------------------------------------------------- projections

-- Every record a file carries: one for iter-N.yaml, one per historical entry.
CREATE TABLE record_files (
    source       TEXT    NOT NULL,
    file         TEXT    NOT NULL,
    ordinal      INTEGER NOT NULL,
    iteration    INTEGER NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('dedicated', 'historical')),
    record       TEXT    NOT NULL CHECK (json_valid(record)),
    content_hash TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (source, file, ordinal)
) STRICT;
CREATE INDEX record_files_by_iteration ON record_files (source, iteration);

-- The effective record of each iteration (a dedicated file wins over
-- historical.yaml; between two dedicated files the later name wins). The
-- record itself stays in record_files (file, ordinal); a few fields are
-- copied out for queries.
CREATE TABLE iterations (
    source         TEXT    NOT NULL,
    iteration      INTEGER NOT NULL,
    file           TEXT    NOT NULL,
    ordinal        INTEGER NOT NULL,
    kind           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    date           TEXT    NOT NULL,
    task_id        TEXT    NOT NULL,
    commit_ref     TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    content_hash   TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    PRIMARY KEY (source, iteration)
) STRICT;
CREATE INDEX iterations_by_session ON iterations (source, session_id, iteration);

CREATE TABLE hook_outcomes (
    source       TEXT    NOT NULL,
    iteration    INTEGER NOT NULL,
    file         TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (json_valid(outcome)),
    records      INTEGER NOT NULL,
    error        TEXT    NOT NULL,
    content_hash TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (source, iteration)
) STRICT;

CREATE TABLE labels (
    source       TEXT    NOT NULL,
    iteration    INTEGER NOT NULL,
    file         TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (json_valid(outcome)),
    labels       INTEGER NOT NULL,
    error        TEXT    NOT NULL,
    content_hash TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (source, iteration)
) STRICT;

-- Repository files records point at, and plans' TASKS.yaml (repo-relative paths).
CREATE TABLE artifacts (
    source       TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    available    INTEGER NOT NULL,
    artifact     TEXT    NOT NULL CHECK (json_valid(artifact)),
    content_hash TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (source, path)
) STRICT;

-- One row per (iteration, rubric version): the latest score under that
-- version. Its breakdown and integrity track stay in the score.computed
-- event `seq` points at (see the score_details view).
CREATE TABLE scores (
    source         TEXT    NOT NULL,
    iteration      INTEGER NOT NULL,
    rubric_version TEXT    NOT NULL,
    scored         INTEGER NOT NULL,
    value          REAL,
    band           TEXT    NOT NULL,
    inputs_hash    TEXT    NOT NULL,
    sidecar        TEXT    NOT NULL,
    sidecar_sha256 TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    PRIMARY KEY (source, iteration, rubric_version)
) STRICT;

CREATE VIEW score_details AS
SELECT s.source, s.iteration, s.rubric_version, s.scored, s.value, s.band, s.inputs_hash,
       json_extract(e.payload, '$.breakdown') AS breakdown,
       json_extract(e.payload, '$.integrity') AS integrity,
       s.sidecar, s.sidecar_sha256, s.seq, e.recorded_at AS scored_at
FROM scores s JOIN events e ON e.seq = s.seq;

CREATE VIEW iteration_records AS
SELECT i.source, i.iteration, i.file, i.kind, i.session_id, i.task_id, i.commit_ref, r.record
FROM iterations i JOIN record_files r
  ON r.source = i.source AND r.file = i.file AND r.ordinal = i.ordinal;

CREATE TABLE sessions (
    source         TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    rubric_version TEXT    NOT NULL,
    iterations     TEXT    NOT NULL CHECK (json_valid(iterations)),
    scored         INTEGER NOT NULL,
    value          REAL,
    band           TEXT    NOT NULL,
    sidecar        TEXT,
    sidecar_sha256 TEXT,
    PRIMARY KEY (source, session_id, rubric_version)
) STRICT;

CREATE TABLE quarantine (
    id           INTEGER PRIMARY KEY,
    source       TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    line         INTEGER,
    col          INTEGER,
    byte_offset  INTEGER,
    reason       TEXT    NOT NULL,
    content_hash TEXT,
    seq          INTEGER NOT NULL,
    resolved_seq INTEGER
) STRICT;
CREATE INDEX quarantine_by_path ON quarantine (source, path, resolved_seq);

-- Ledger-wide facts folded from events (active rubric, backfill progress).
CREATE TABLE ledger_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
