-- Sidecars that could not be written (a symlink at the target, a read-only directory,
-- a full disk): one row per path, the last reason, and since when. A problem record,
-- not a quarantine (nothing was wrong with the input) and not an event (it is about
-- the disk, not the ledger): the row goes once the sidecar is written, or found equal
-- to the ledger on disk. `agentledger quarantine` and `status` show these.
CREATE TABLE sidecar_problems (
    path   TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    since  TEXT NOT NULL
) STRICT;
