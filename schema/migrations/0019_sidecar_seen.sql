-- The sidecars as last read and found right (#25): a full sync stats each sidecar and
-- reads only those whose stat key moved since (ledger/sidecar_sync.py, `Seen`). A
-- cache of what is on disk, not derived from events: rebuild leaves it; a stale row
-- only costs a read.
CREATE TABLE sidecar_seen (
    path      TEXT    PRIMARY KEY,
    dev       INTEGER NOT NULL,
    ino       INTEGER NOT NULL,
    size      INTEGER NOT NULL,
    mtime_ns  INTEGER NOT NULL,
    sha256    TEXT    NOT NULL
) STRICT, WITHOUT ROWID;
