-- Each session sidecar's bytes, as rendered when its session was last recomputed under a
-- rubric: derived state like ``score_sidecars`` (a rebuild renders them again). A sync that
-- rewrites many session sidecars (a switch back to a rubric the ledger holds) hands these to
-- the worker processes instead of reading every session's scores and rendering them here.
-- A session projected before this table has no row: its sidecar is rendered as before.
CREATE TABLE session_sidecars (
    source         TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    rubric_version TEXT NOT NULL,
    bytes          BLOB NOT NULL,
    PRIMARY KEY (source, session_id, rubric_version)
) STRICT;
