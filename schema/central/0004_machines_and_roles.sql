-- Team ledger (PostgreSQL), migration 4: each machine writes only its own ledger,
-- enforced by the server; readers can only read; latest scores follow each ledger's
-- active rubric. Run by the admin (the role that owns the schema; it needs
-- CREATEROLE, or to be a superuser): `agentledger central init ADMIN_URL`.
-- Every event stays; docs/team.md, "Roles and the threat model".
--
-- Roles (cluster-wide names, as PostgreSQL roles are):
--   agentledger_machine  the group of the shipping roles (`central add-machine NAME`):
--                        INSERT into events (for its own ledgers: the trigger below),
--                        EXECUTE register() and project(); SELECT; nothing else.
--   agentledger_reader   the group of the reading roles (`central add-reader NAME`, and
--                        what `query --central` drops to): SELECT, nothing else.
-- The admin keeps ownership of every object, so it alone can change them.

DO $$
BEGIN
    IF to_regrole('agentledger_machine') IS NULL THEN
        CREATE ROLE agentledger_machine NOLOGIN;
    END IF;
    IF to_regrole('agentledger_reader') IS NULL THEN
        CREATE ROLE agentledger_reader NOLOGIN;
    END IF;
END $$;
-- the admin may assume the reader role, which is what the read path does (central/read.py)
GRANT agentledger_reader TO CURRENT_USER;

-- Code installed beside the migrations and re-installed when its text changes
-- (schema/central/projection.sql).
CREATE TABLE agentledger.installed_code (
    name         text        PRIMARY KEY,
    sha256       text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- The login roles made by `central add-machine` / `add-reader`.
CREATE TABLE agentledger.machines (
    role       name        PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('machine', 'reader')),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Which machine role may write each ledger id: the first role to ship (or, for an
-- imported event, to name as its origin) an id claims it, and `central add-machine
-- NAME` binds the ledgers shipped under NAME before roles existed. The admin's own
-- shipping claims nothing.
CREATE TABLE agentledger.ledger_roles (
    ledger_id  uuid        PRIMARY KEY,
    role       name        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_roles_by_role ON agentledger.ledger_roles (role);

-- True for the admin (a member of the schema's owner) and superusers: they may ship any
-- ledger. session_user: inside a SECURITY DEFINER function current_user is the owner.
CREATE FUNCTION agentledger.is_admin() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_has_role(session_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'agentledger'), 'MEMBER')
$$;

-- Claim the ids for the calling role where unclaimed; raise unless every one is then its own.
CREATE FUNCTION agentledger.claim(ids uuid[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    other record;
BEGIN
    IF agentledger.is_admin() THEN
        RETURN;
    END IF;
    INSERT INTO agentledger.ledger_roles (ledger_id, role)
    SELECT DISTINCT i, session_user FROM unnest(ids) AS i WHERE i IS NOT NULL
    ON CONFLICT (ledger_id) DO NOTHING;
    SELECT r.ledger_id, r.role INTO other FROM agentledger.ledger_roles r
    WHERE r.ledger_id = ANY (ids) AND r.role <> session_user LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger % belongs to machine %, not to %', other.ledger_id, other.role, session_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'a copied ledger file keeps its id: agentledger central new-id gives this one its own';
    END IF;
END $$;

-- A shipper registers its ledger (name and host) when it connects.
CREATE FUNCTION agentledger.register(p_ledger uuid, p_name text, p_host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM agentledger.claim(ARRAY[p_ledger]);
    INSERT INTO agentledger.ledgers (ledger_id, name, host) VALUES (p_ledger, p_name, p_host)
    ON CONFLICT (ledger_id) DO UPDATE SET name = excluded.name, host = excluded.host;
END $$;

-- Every insert into events (binary COPY included) is checked once per statement: each
-- ledger id and each origin in it must be the calling role's. A refused batch rolls
-- back whole.
CREATE FUNCTION agentledger.check_shipped() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT agentledger.is_admin() THEN
        PERFORM agentledger.claim(ARRAY(SELECT ledger_id FROM shipped UNION SELECT origin FROM shipped));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_shipped_by_their_machine AFTER INSERT ON agentledger.events
    REFERENCING NEW TABLE AS shipped FOR EACH STATEMENT EXECUTE FUNCTION agentledger.check_shipped();

-- Scores are kept per rubric version; the latest score of an iteration is its score under
-- its ledger's active rubric (the last rubric.activated), as in the local ledger.
ALTER TABLE agentledger.ledgers ADD COLUMN active_rubric text, ADD COLUMN active_rubric_seq bigint NOT NULL DEFAULT 0;
UPDATE agentledger.ledgers l SET active_rubric = r.version, active_rubric_seq = r.seq
FROM (SELECT DISTINCT ON (ledger_id) ledger_id, payload->>'version' AS version, seq FROM agentledger.events
      WHERE type = 'rubric.activated' ORDER BY ledger_id, seq DESC) r
WHERE r.ledger_id = l.ledger_id;

CREATE TABLE agentledger.scores (
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
    PRIMARY KEY (ledger_id, source, iteration, rubric_version)
);
CREATE INDEX scores_by_time ON agentledger.scores (scored_at DESC);
INSERT INTO agentledger.scores (ledger_id, source, iteration, rubric_version, scored, value, band, inputs_hash,
                                scored_at, seq)
SELECT DISTINCT ON (e.ledger_id, e.source, p.iteration, p.rubric_version) e.ledger_id, e.source, p.iteration,
       p.rubric_version, p.scored, CASE WHEN jsonb_typeof(p.value) = 'number' THEN p.value::double precision END,
       p.band, p.inputs_hash, e.recorded_at, e.seq
FROM agentledger.events e, jsonb_to_record(e.payload) AS p(iteration integer, rubric_version text, scored boolean,
                                                           value jsonb, band text, inputs_hash text)
WHERE e.type = 'score.computed'
ORDER BY e.ledger_id, e.source, p.iteration, p.rubric_version, e.seq DESC;

DROP VIEW agentledger.latest_scores, agentledger.signal_contributions, agentledger.session_overview;
DROP TABLE agentledger.score_latest;
CREATE VIEW agentledger.score_latest AS
SELECT s.ledger_id, s.source, s.iteration, s.rubric_version, s.scored, s.value, s.band, s.inputs_hash, s.scored_at,
       s.seq
FROM agentledger.scores s JOIN agentledger.ledgers l ON l.ledger_id = s.ledger_id AND l.active_rubric = s.rubric_version;

CREATE VIEW agentledger.latest_scores AS
SELECT l.name AS ledger, l.host, s.source, s.iteration, i.session_id, i.task_id, s.rubric_version, s.scored,
       s.value, s.band, s.inputs_hash, s.scored_at, s.seq, s.ledger_id
FROM agentledger.score_latest s
JOIN agentledger.ledgers l USING (ledger_id)
LEFT JOIN agentledger.iterations i USING (ledger_id, source, iteration);

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

-- Privileges: nothing for PUBLIC; SELECT for both groups; the machines may add events
-- (checked by the trigger) and call register() and project() (projection.sql), which
-- run as the admin and touch only the caller's ledgers. No UPDATE, DELETE or TRUNCATE
-- for anyone but the admin.
REVOKE ALL ON ALL TABLES IN SCHEMA agentledger FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA agentledger FROM PUBLIC;
REVOKE ALL ON SCHEMA agentledger FROM PUBLIC;
GRANT USAGE ON SCHEMA agentledger TO agentledger_machine, agentledger_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA agentledger TO agentledger_machine, agentledger_reader;
GRANT INSERT ON agentledger.events TO agentledger_machine;
GRANT EXECUTE ON FUNCTION agentledger.register(uuid, text, text) TO agentledger_machine;
ALTER DEFAULT PRIVILEGES IN SCHEMA agentledger GRANT SELECT ON TABLES TO agentledger_machine, agentledger_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA agentledger REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
