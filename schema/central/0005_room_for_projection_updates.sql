-- Team ledger (PostgreSQL), migration 5: room on each page of the iterations table,
-- whose rows a new record of an iteration already held updates.
--
-- On a full page an updated row's new version goes to another page, and each index of
-- the table gets an entry for it. With a fifth of each page kept free, a new record of
-- an iteration (its session, so no indexed column, unchanged) stays on its page and
-- touches no index: a heap-only update. Pages written before keep what they hold until
-- they are rewritten. The scores table is left as it is: a new score of an iteration
-- changes its scored_at, which is indexed, so the update needs index entries anyway.
ALTER TABLE agentledger.iterations SET (fillfactor = 80);
