-- Team ledger, migration 5 (#56): a ledger's name says which ledger it is, once.
--
-- A ledger name is unique on the server. A ledger registers under the name it asks
-- for only when no other ledger holds it and it is not another machine role's own name
-- (`central add-machine alice_box` reserves alice_box for that role's ledgers);
-- otherwise it is registered as NAME~ID8 (the first eight hex digits of its own id), so
-- a machine cannot pass its ledger off as another machine's, and a ledger re-created
-- from its export (a new id, the old name) shows beside its predecessor, not merged
-- into it. The views and the team report key on the ledger id and show the name.

-- names held twice before this migration: the ledger of the role named like it keeps
-- the name, else the one with the most events, else the lowest id; the others take
-- their NAME~ID8
WITH ranked AS (
    SELECT l.ledger_id, l.name,
           row_number() OVER (PARTITION BY l.name ORDER BY (r.role IS NOT NULL AND r.role::text = l.name) DESC,
                              l.last_seq DESC, l.ledger_id) AS n
    FROM agentledger.ledgers l LEFT JOIN agentledger.ledger_roles r USING (ledger_id))
UPDATE agentledger.ledgers l SET name = l.name || '~' || left(l.ledger_id::text, 8)
FROM ranked WHERE ranked.ledger_id = l.ledger_id AND ranked.n > 1;

CREATE UNIQUE INDEX ledgers_name_unique ON agentledger.ledgers (name);

-- The name a ledger gets: the one asked for, or NAME~ID8 (see above).
CREATE FUNCTION agentledger.ledger_name(p_ledger uuid, p_name text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM agentledger.ledgers WHERE name = p_name AND ledger_id <> p_ledger)
                 AND (agentledger.is_admin() OR p_name = session_user::text OR NOT EXISTS (
                      SELECT 1 FROM agentledger.machines WHERE role::text = p_name AND kind = 'machine'))
                THEN p_name ELSE p_name || '~' || left(p_ledger::text, 8) END
$$;

CREATE OR REPLACE FUNCTION agentledger.register(p_ledger uuid, p_name text, p_host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    given text;
BEGIN
    PERFORM agentledger.claim(ARRAY[p_ledger]);
    -- a ledger that holds a name keeps it; a new one, or one that asks for another name, gets its own
    IF EXISTS (SELECT 1 FROM agentledger.ledgers WHERE ledger_id = p_ledger
               AND (name = p_name OR name = p_name || '~' || left(p_ledger::text, 8))) THEN
        UPDATE agentledger.ledgers SET host = p_host WHERE ledger_id = p_ledger;
        RETURN;
    END IF;
    given := agentledger.ledger_name(p_ledger, p_name);
    INSERT INTO agentledger.ledgers (ledger_id, name, host) VALUES (p_ledger, given, p_host)
    ON CONFLICT (ledger_id) DO UPDATE SET name = excluded.name, host = excluded.host;
END $$;
