-- The checkpoints of the artifacts and plans an iteration log's records point at, by
-- source and path (#25): a scan that finds the log directory as the last quiet scan left
-- it (ledger/scan_marks.py) still compares each artifact's stat with its checkpoint, and
-- reads those checkpoints through this index instead of every checkpoint of the source
-- (2,566 rows of 16,475 at 10,000 generated iterations; the rest are log files). The
-- condition is the one ``ledger/iterlogs.py`` (``_ARTIFACT_SIDE``) queries with, word for
-- word: SQLite uses a partial index only for a query whose condition implies its own.
CREATE INDEX checkpoints_of_artifacts ON source_checkpoints (source, path)
    WHERE kind IN ('verifier_result', 'review_decision', 'tasks');
