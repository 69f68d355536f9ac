-- Who consumed this source's pending queue last: a mark the consuming process makes
-- its own ("<random token>:<count>"). The service keeps an in-memory index of every
-- iteration's commit, updated from the queue entries it consumes; a mark it did not
-- write means another writer (an `agentledger ingest` run beside it) consumed entries
-- that never reached that index, and the service rebuilds it. Source state, like the
-- trunk tip beside it: rebuild leaves it alone.
ALTER TABLE git_state ADD COLUMN consumer TEXT;
