-- Marks of quiet iteration-log directories (#25): a full scan that found a log
-- directory in line with the ledger keeps its listing's mark and a stamp of the ledger
-- and configuration it was in line with; the next full scan whose listing has that mark
-- under that stamp compares no log file with its checkpoint and no sidecar with the
-- ledger (ledger/scan_marks.py). A cache, not derived from events: a rebuild empties
-- it, and a row whose stamp or mark no longer matches only costs a full comparison.
CREATE TABLE scan_marks (
    source TEXT PRIMARY KEY,
    mark   TEXT NOT NULL,
    stamp  TEXT NOT NULL
) STRICT, WITHOUT ROWID;
