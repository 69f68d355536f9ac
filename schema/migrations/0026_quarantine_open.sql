-- The open problems alone, by source and path: a transaction that records many files asks
-- once which of their paths have one (as a rule none) instead of updating each path's rows
-- (``store/quarantine.py``). A cold ingest of 10,000 iterations ran ~15,000 such updates.
CREATE INDEX quarantine_open ON quarantine (source, path) WHERE resolved_seq IS NULL;
