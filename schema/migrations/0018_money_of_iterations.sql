-- Money for iterations and sessions (issue #24, item 4): a Claude turn's model and how
-- many of its cache writes were 1-hour writes (usage.cache_creation), for pricing at
-- query time; NULL where the transcript did not say (and for facts recorded before).
ALTER TABLE transcript_facts ADD COLUMN model TEXT;
ALTER TABLE transcript_facts ADD COLUMN cache_write_1h INTEGER;
