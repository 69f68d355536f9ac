-- Team ledger (PostgreSQL), migration 1. Everything lives in the schema
-- `agentledger` (created by the migrator, which also records the version in
-- agentledger.schema_version); the migrator runs this inside one transaction.
--
-- `events` is the union of every shipped ledger's events: identified by
-- (ledger_id, seq) and by (origin, idempotency_key), so a batch sent twice changes
-- nothing. The other tables are projections kept current in the same transaction
-- as the events they come from (agentledger/central/ship.py), each row carrying
-- the seq of the event it reflects so that applying an event twice, or an older one
-- after a newer one, changes nothing either.

CREATE TABLE agentledger.ledgers (
    ledger_id        uuid        PRIMARY KEY,
    name             text        NOT NULL,            -- [ledger] name, else the host name
    host             text        NOT NULL,
    first_shipped_at timestamptz NOT NULL DEFAULT now(),
    last_shipped_at  timestamptz NOT NULL DEFAULT now(),
    last_seq         bigint      NOT NULL DEFAULT 0   -- the highest seq the server holds
);

CREATE TABLE agentledger.events (
    ledger_id       uuid        NOT NULL REFERENCES agentledger.ledgers,
    seq             bigint      NOT NULL,             -- the seq in that ledger
    origin          uuid        NOT NULL,             -- the ledger that first recorded it
    idempotency_key text        NOT NULL,
    stream          text        NOT NULL,
    type            text        NOT NULL,
    schema_version  integer     NOT NULL,
    content_hash    text        NOT NULL,
    occurred_at     text,
    recorded_at     timestamptz NOT NULL,
    source          text        NOT NULL,
    source_path     text,
    source_position text,
    payload         jsonb,                            -- NULL only when JSONB cannot hold it (a \u0000)
    payload_text    text,                             -- then the exact text is here
    shipped_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, seq),
    UNIQUE (origin, idempotency_key),
    CHECK (payload IS NOT NULL OR payload_text IS NOT NULL)
);
CREATE INDEX events_by_type ON agentledger.events (type, ledger_id, seq);
-- lz4 compresses large payloads (score breakdowns) several times faster than the
-- default pglz; a server built without lz4 keeps its default
DO $$ BEGIN
    ALTER TABLE agentledger.events ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR syntax_error THEN NULL;  -- no lz4, or a server before 14
END $$;

-- The most recent score of each iteration of each ledger's iteration log.
CREATE TABLE agentledger.score_latest (
    ledger_id      uuid        NOT NULL,
    source         text        NOT NULL,
    iteration      integer     NOT NULL,
    rubric_version text        NOT NULL,
    scored         boolean     NOT NULL,
    value          double precision,
    band           text        NOT NULL,
    inputs_hash    text        NOT NULL,
    scored_at      timestamptz NOT NULL,
    seq            bigint      NOT NULL,
    PRIMARY KEY (ledger_id, source, iteration)
);
CREATE INDEX score_latest_by_time ON agentledger.score_latest (scored_at DESC);

-- Iterations as their records say (a dedicated iter-N.yaml beats historical.yaml).
CREATE TABLE agentledger.iterations (
    ledger_id  uuid    NOT NULL,
    source     text    NOT NULL,
    iteration  integer NOT NULL,
    kind       text    NOT NULL,                      -- dedicated | historical
    session_id text    NOT NULL DEFAULT '',
    task_id    text    NOT NULL DEFAULT '',
    date       text    NOT NULL DEFAULT '',
    commit_ref text    NOT NULL DEFAULT '',
    input_tokens  bigint,                             -- the record's session_tokens, when it has them
    output_tokens bigint,
    seq        bigint  NOT NULL,
    PRIMARY KEY (ledger_id, source, iteration)
);
CREATE INDEX iterations_by_session ON agentledger.iterations (ledger_id, source, session_id);

CREATE TABLE agentledger.trials (
    ledger_id          uuid    NOT NULL,
    source             text    NOT NULL,
    run_dir            text    NOT NULL,
    item_id            text    NOT NULL,
    run_id             text    NOT NULL,
    experiment         text    NOT NULL DEFAULT '',
    eval_name          text    NOT NULL,
    stimulus           text    NOT NULL,
    model              text    NOT NULL,
    variant            text    NOT NULL,
    trial_index        integer NOT NULL,
    status             text    NOT NULL,
    passed             boolean NOT NULL,
    duration_ms        bigint,
    input_tokens       bigint,
    output_tokens      bigint,
    seq                bigint  NOT NULL,
    PRIMARY KEY (ledger_id, source, run_dir, item_id)
);
CREATE INDEX trials_by_eval ON agentledger.trials (eval_name, model);

CREATE TABLE agentledger.quarantine (
    ledger_id    uuid   NOT NULL,
    seq          bigint NOT NULL,
    source       text   NOT NULL,
    path         text   NOT NULL,
    kind         text   NOT NULL,
    line         integer,
    col          integer,
    byte_offset  bigint,
    reason       text   NOT NULL,
    resolved_seq bigint,
    PRIMARY KEY (ledger_id, seq)
);
CREATE INDEX quarantine_open ON agentledger.quarantine (ledger_id, source, path) WHERE resolved_seq IS NULL;

-- The views people query: the local ledger's names and columns where they make
-- sense, each with the ledger (its name) and the host in front.
CREATE VIEW agentledger.latest_scores AS
SELECT l.name AS ledger, l.host, s.source, s.iteration, i.session_id, i.task_id, s.rubric_version, s.scored,
       s.value, s.band, s.inputs_hash, s.scored_at, s.seq, s.ledger_id
FROM agentledger.score_latest s
JOIN agentledger.ledgers l USING (ledger_id)
LEFT JOIN agentledger.iterations i USING (ledger_id, source, iteration);

CREATE VIEW agentledger.score_history AS
SELECT l.name AS ledger, l.host, e.source, (e.payload->>'iteration')::integer AS iteration,
       e.payload->>'rubric_version' AS rubric_version, (e.payload->>'scored')::boolean AS scored,
       CASE WHEN jsonb_typeof(e.payload->'value') = 'number' THEN (e.payload->>'value')::double precision END AS value,
       e.payload->>'band' AS band, e.payload->>'inputs_hash' AS inputs_hash, e.recorded_at AS scored_at, e.seq,
       e.ledger_id
FROM agentledger.events e JOIN agentledger.ledgers l USING (ledger_id)
WHERE e.type = 'score.computed';

CREATE VIEW agentledger.signal_contributions AS
SELECT l.name AS ledger, l.host, s.source, s.iteration, s.rubric_version, r->>'signal' AS signal,
       r->>'label' AS label, (r->>'present')::boolean AS present, (r->>'sub_score')::double precision AS sub_score,
       (r->>'nominal_weight')::double precision AS nominal_weight,
       (r->>'effective_weight')::double precision AS effective_weight,
       (r->>'contribution')::double precision AS contribution, r->>'detail' AS detail, s.scored_at, s.ledger_id
FROM agentledger.score_latest s
JOIN agentledger.ledgers l USING (ledger_id)
JOIN agentledger.events e ON e.ledger_id = s.ledger_id AND e.seq = s.seq,
     jsonb_array_elements(e.payload->'breakdown') AS r;

CREATE VIEW agentledger.session_overview AS
SELECT l.name AS ledger, l.host, s.source, i.session_id, count(*) AS iterations,
       min(s.iteration) AS first_iteration, max(s.iteration) AS last_iteration,
       round(avg(s.value)::numeric, 3) AS mean_score, round(min(s.value)::numeric, 3) AS min_score,
       round(max(s.value)::numeric, 3) AS max_score,
       count(*) FILTER (WHERE s.band = 'excellent') AS excellent, count(*) FILTER (WHERE s.band = 'good') AS good,
       count(*) FILTER (WHERE s.band = 'fair') AS fair, count(*) FILTER (WHERE s.band = 'poor') AS poor,
       string_agg(DISTINCT s.rubric_version, ',') AS rubric_versions, max(s.scored_at) AS last_scored_at,
       s.ledger_id
FROM agentledger.score_latest s
JOIN agentledger.ledgers l USING (ledger_id)
JOIN agentledger.iterations i USING (ledger_id, source, iteration)
WHERE i.session_id <> ''
GROUP BY l.name, l.host, s.ledger_id, s.source, i.session_id;

CREATE VIEW agentledger.trial_pass_rates_by_model AS
SELECT eval_name, model, count(*) AS trials, count(*) FILTER (WHERE passed) AS passed,
       round(avg(passed::integer)::numeric, 4) AS pass_rate, count(DISTINCT (ledger_id, source, run_dir)) AS runs,
       count(DISTINCT ledger_id) AS ledgers
FROM agentledger.trials GROUP BY eval_name, model;

CREATE VIEW agentledger.run_summaries AS
SELECT l.name AS ledger, l.host, t.source, t.run_dir, min(t.run_id) AS run_id, min(t.experiment) AS experiment,
       min(t.variant) AS variant, count(*) AS trials, count(*) FILTER (WHERE t.passed) AS passed,
       count(*) FILTER (WHERE t.status = 'error') AS errors, round(avg(t.passed::integer)::numeric, 4) AS pass_rate,
       t.ledger_id
FROM agentledger.trials t JOIN agentledger.ledgers l USING (ledger_id)
GROUP BY l.name, l.host, t.ledger_id, t.source, t.run_dir;

CREATE VIEW agentledger.open_quarantine AS
SELECT l.name AS ledger, l.host, q.source, q.path, q.kind, q.line, q.col, q.byte_offset, q.reason,
       e.recorded_at AS quarantined_at, q.seq, q.ledger_id
FROM agentledger.quarantine q
JOIN agentledger.ledgers l USING (ledger_id)
JOIN agentledger.events e ON e.ledger_id = q.ledger_id AND e.seq = q.seq
WHERE q.resolved_seq IS NULL;

CREATE VIEW agentledger.quarantine_summary AS
SELECT l.name AS ledger, l.host, q.source, q.kind, count(*) FILTER (WHERE q.resolved_seq IS NULL) AS open,
       count(*) FILTER (WHERE q.resolved_seq IS NOT NULL) AS resolved, count(*) AS total, q.ledger_id
FROM agentledger.quarantine q JOIN agentledger.ledgers l USING (ledger_id)
GROUP BY l.name, l.host, q.ledger_id, q.source, q.kind;
