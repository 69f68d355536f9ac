-- Each score's sidecar bytes, as rendered when it was scored: derived state like every
-- projection (a rebuild renders them from the score.computed payload). A sync that
-- rewrites many sidecars (a switch back to a rubric the ledger holds) writes these
-- instead of decoding and rendering every payload. Apart from ``scores`` so that the
-- queries that scan scores read small rows. They cost what the files do (~1.8 KB a
-- score). Scores projected before this table have no row: their sidecars are rendered
-- from their events, as before.
CREATE TABLE score_sidecars (
    source         TEXT    NOT NULL,
    iteration      INTEGER NOT NULL,
    rubric_version TEXT    NOT NULL,
    bytes          BLOB    NOT NULL,
    PRIMARY KEY (source, iteration, rubric_version)
) STRICT;
