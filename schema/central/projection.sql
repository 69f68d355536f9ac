-- The team ledger's projections: the one place the central tables are derived from the
-- events (the local ledger's counterpart is daemon/agentledger/store/; tests/
-- test_central_parity.py replays the same events through both and compares them row by
-- row). Not a numbered migration: `agentledger central init` (and an admin's shipper)
-- installs this file again whenever its text changes (agentledger.installed_code).
--
-- project(ledger, lo, hi, types) brings the projections up to date with the events the
-- server holds for that ledger in the seq range (lo, hi], in the shipper's transaction.
-- It runs as the admin (SECURITY DEFINER) so that a machine role needs no UPDATE on any
-- table, and it refuses a ledger that is not the caller's (agentledger.claim). Each row
-- remembers the seq of the event it reflects and is replaced only by a later one, so
-- applying a range twice, or ranges out of order, leaves the same rows.

CREATE OR REPLACE FUNCTION agentledger.project(p_ledger uuid, p_lo bigint, p_hi bigint, p_types text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- event types that resolve a file's open quarantine (as the local projections do)
    resolving constant text[] := ARRAY['iteration.recorded', 'historical.recorded', 'hook_outcomes.recorded',
                                       'labels.recorded', 'artifact.recorded', 'file.removed',
                                       'annotation.recorded'];
    line_kinds constant text[] := ARRAY['vally', 'transcript'];
BEGIN
    PERFORM agentledger.claim(ARRAY[p_ledger]);
    -- one range at a time per ledger: batches sent on several connections at once. The
    -- ledger's row, locked FOR UPDATE, which needs UPDATE on the table: no reader can take
    -- this lock (an advisory lock, which any role may take, let a reader hold a machine's
    -- shipping for as long as it liked)
    PERFORM 1 FROM agentledger.ledgers WHERE ledger_id = p_ledger FOR UPDATE;

    -- the active rubric: the last rubric.activated
    IF 'rubric.activated' = ANY (p_types) THEN
        UPDATE agentledger.ledgers l SET active_rubric = r.version, active_rubric_seq = r.seq
        FROM (SELECT e.payload->>'version' AS version, e.seq FROM agentledger.events e
              WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi AND e.type = 'rubric.activated'
              ORDER BY e.seq DESC LIMIT 1) r
        WHERE l.ledger_id = p_ledger AND r.seq > l.active_rubric_seq;
    END IF;

    -- each iteration's latest score under each rubric (a score's payload is compressed:
    -- read once by jsonb_to_record, not decompressed again for each ->>)
    IF 'score.computed' = ANY (p_types) THEN
        INSERT INTO agentledger.scores AS t (ledger_id, source, iteration, rubric_version, scored, value, band,
                                             inputs_hash, scored_at, seq)
        SELECT DISTINCT ON (e.source, p.iteration, p.rubric_version) e.ledger_id, e.source, p.iteration,
               p.rubric_version, p.scored, CASE WHEN jsonb_typeof(p.value) = 'number' THEN p.value::double precision END,
               p.band, p.inputs_hash, e.recorded_at, e.seq
        FROM agentledger.events e, jsonb_to_record(e.payload) AS p(iteration integer, rubric_version text,
                                                                   scored boolean, value jsonb, band text,
                                                                   inputs_hash text)
        WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi AND e.type = 'score.computed'
        ORDER BY e.source, p.iteration, p.rubric_version, e.seq DESC
        ON CONFLICT (ledger_id, source, iteration, rubric_version) DO UPDATE SET scored = excluded.scored,
            value = excluded.value, band = excluded.band, inputs_hash = excluded.inputs_hash,
            scored_at = excluded.scored_at, seq = excluded.seq
        WHERE excluded.seq > t.seq;
    END IF;

    -- iterations: a dedicated record beats the archive's; among equals the later one
    IF p_types && ARRAY['iteration.recorded', 'historical.recorded'] THEN
        INSERT INTO agentledger.iterations AS t (ledger_id, source, iteration, kind, session_id, task_id, date,
                                                 commit_ref, input_tokens, output_tokens, seq)
        SELECT DISTINCT ON (c.source, c.iteration) c.ledger_id, c.source, c.iteration, c.kind,
               coalesce(c.r->'agent'->>'session_id', ''), coalesce(c.r->>'task_id', ''), coalesce(c.r->>'date', ''),
               coalesce(c.r->>'commit', ''), (c.r->'session_tokens'->>'input_tokens')::bigint,
               (c.r->'session_tokens'->>'output_tokens')::bigint, c.seq
        FROM (SELECT e.ledger_id, e.source, (e.payload->'record'->>'iteration')::integer AS iteration,
                     'dedicated' AS kind, e.payload->'record' AS r, e.seq
              FROM agentledger.events e
              WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi AND e.type = 'iteration.recorded'
              UNION ALL
              SELECT e.ledger_id, e.source, (x->>'iteration')::integer, 'historical', x, e.seq
              FROM agentledger.events e, jsonb_array_elements(e.payload->'records') AS x
              WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi AND e.type = 'historical.recorded') c
        ORDER BY c.source, c.iteration, c.kind = 'dedicated' DESC, c.seq DESC
        ON CONFLICT (ledger_id, source, iteration) DO UPDATE SET kind = excluded.kind,
            session_id = excluded.session_id, task_id = excluded.task_id, date = excluded.date,
            commit_ref = excluded.commit_ref, input_tokens = excluded.input_tokens,
            output_tokens = excluded.output_tokens, seq = excluded.seq
        WHERE (excluded.kind = 'dedicated' AND (t.kind = 'historical' OR excluded.seq > t.seq))
           OR (excluded.kind = 'historical' AND t.kind = 'historical' AND excluded.seq > t.seq);
    END IF;

    -- eval trials (a re-reported trial replaces its row)
    IF 'trial.completed' = ANY (p_types) THEN
        INSERT INTO agentledger.trials AS t (ledger_id, source, run_dir, item_id, run_id, experiment, eval_name,
                                             stimulus, model, variant, trial_index, status, passed, duration_ms,
                                             input_tokens, output_tokens, seq)
        SELECT DISTINCT ON (e.source, e.payload->>'run_dir', e.payload->'trial'->>'item_id') e.ledger_id, e.source,
               e.payload->>'run_dir', e.payload->'trial'->>'item_id', e.payload->'trial'->>'run_id',
               coalesce(e.payload->'trial'->>'experiment', ''), e.payload->'trial'->>'eval_name',
               e.payload->'trial'->>'stimulus', e.payload->'trial'->>'model', e.payload->'trial'->>'variant',
               (e.payload->'trial'->>'trial_index')::integer, e.payload->'trial'->>'status',
               (e.payload->'trial'->>'passed')::boolean, (e.payload->'trial'->>'duration_ms')::bigint,
               (e.payload->'trial'->>'input_tokens')::bigint, (e.payload->'trial'->>'output_tokens')::bigint, e.seq
        FROM agentledger.events e
        WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi AND e.type = 'trial.completed'
        ORDER BY e.source, e.payload->>'run_dir', e.payload->'trial'->>'item_id', e.seq DESC
        ON CONFLICT (ledger_id, source, run_dir, item_id) DO UPDATE SET run_id = excluded.run_id,
            experiment = excluded.experiment, eval_name = excluded.eval_name, stimulus = excluded.stimulus,
            model = excluded.model, variant = excluded.variant, trial_index = excluded.trial_index,
            status = excluded.status, passed = excluded.passed, duration_ms = excluded.duration_ms,
            input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, seq = excluded.seq
        WHERE excluded.seq > t.seq;
    END IF;

    -- quarantine: recorded (resolved already if a later event about the same file is on the
    -- server), and earlier open records resolved by this range's events; the first later
    -- event resolves, as locally
    -- (a file read whole has one open problem: a newer quarantine of it resolves the older,
    -- as store/projections.py LINE_KINDS says; a tailed file's line records stay apart)
    IF 'source.quarantined' = ANY (p_types) THEN
        INSERT INTO agentledger.quarantine (ledger_id, seq, source, path, kind, line, col, byte_offset, reason,
                                            resolved_seq)
        SELECT e.ledger_id, e.seq, e.source, e.payload->>'path', e.payload->>'kind', (e.payload->>'line')::integer,
               (e.payload->>'column')::integer, (e.payload->>'byte_offset')::bigint, e.payload->>'reason',
               (SELECT min(r.seq) FROM agentledger.events r
                WHERE r.ledger_id = e.ledger_id AND r.seq > e.seq
                  AND (r.type = ANY (resolving) OR (r.type = 'source.quarantined'
                                                    AND NOT r.payload->>'kind' = ANY (line_kinds)))
                  AND r.source = e.source AND coalesce(r.payload->>'file', r.payload->>'path') = e.payload->>'path')
        FROM agentledger.events e
        WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi AND e.type = 'source.quarantined'
        ON CONFLICT DO NOTHING;
    END IF;
    IF p_types && (resolving || 'source.quarantined'::text) THEN
        UPDATE agentledger.quarantine q SET resolved_seq = (
            SELECT min(r.seq) FROM agentledger.events r
            WHERE r.ledger_id = q.ledger_id AND r.seq > q.seq
              AND (r.type = ANY (resolving) OR (r.type = 'source.quarantined'
                                                AND NOT r.payload->>'kind' = ANY (line_kinds)))
              AND r.source = q.source AND coalesce(r.payload->>'file', r.payload->>'path') = q.path)
        WHERE q.ledger_id = p_ledger AND q.resolved_seq IS NULL AND (q.source, q.path) IN (
            SELECT e.source, coalesce(e.payload->>'file', e.payload->>'path') FROM agentledger.events e
            WHERE e.ledger_id = p_ledger AND e.seq > p_lo AND e.seq <= p_hi
              AND (e.type = ANY (resolving) OR (e.type = 'source.quarantined'
                                                AND NOT e.payload->>'kind' = ANY (line_kinds))));
    END IF;

    UPDATE agentledger.ledgers SET last_shipped_at = now(), last_seq = greatest(last_seq, p_hi)
    WHERE ledger_id = p_ledger;
END $$;

REVOKE ALL ON FUNCTION agentledger.project(uuid, bigint, bigint, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agentledger.project(uuid, bigint, bigint, text[]) TO agentledger_machine;

-- Room on each page of the iterations table, whose rows a new record of an iteration
-- already held updates: on a full page the new version goes to another page, with an
-- entry in each index; with a fifth of each page free it stays on its page and touches no
-- index (a heap-only update: the record's session, the one indexed column besides the
-- key, is unchanged). Pages written before keep what they hold until rewritten. The
-- scores table is left full: a new score changes scored_at, which is indexed, so it
-- needs its index entries anyway. Set here rather than by a numbered migration: a
-- machine that meets a schema behind its own stops shipping until the admin's
-- `central init`, but one that meets older code here ships on, and that init sets this.
ALTER TABLE agentledger.iterations SET (fillfactor = 80);
