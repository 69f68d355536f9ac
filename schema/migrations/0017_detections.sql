-- Regressions and improvements noticed while they happen (issue #24, item 3).
--
-- `detector_checkpoints`: for each feed (one a source: "iterations:ID",
-- "trials:ID", "annotations:ID"), the last point it has read (an iteration number
-- or an event seq) and its detectors' state; saved in the same transaction as the
-- detection events that reading produced, like `source_checkpoints`. It is not a
-- projection: `rebuild` keeps it (the detections themselves are events).
CREATE TABLE detector_checkpoints (
    feed      TEXT    PRIMARY KEY,
    position  INTEGER NOT NULL,
    state     TEXT    NOT NULL CHECK (json_valid(state)),
    last_seq  INTEGER
) STRICT;

-- One row per `regression.detected` / `improvement.detected` event.
CREATE TABLE detections (
    seq          INTEGER PRIMARY KEY,   -- the event's
    kind         TEXT    NOT NULL,      -- regression | improvement
    feed         TEXT    NOT NULL,      -- iterations | trials | annotations
    source       TEXT    NOT NULL,
    scope        TEXT    NOT NULL,      -- the eval of a trial stream; '' otherwise
    metric       TEXT    NOT NULL,      -- score, signal:NAME, pass_rate, solved
    began        TEXT    NOT NULL,      -- the first point of the shift: "iteration 120", "trial …"
    noticed      TEXT    NOT NULL,      -- the point at which it was noticed
    began_at     TEXT,                  -- that point's date or time
    points       INTEGER NOT NULL,      -- points from began to noticed
    before       REAL    NOT NULL,      -- the mean before (the detector's reference)
    after        REAL    NOT NULL,      -- the mean since began
    size_sd      REAL    NOT NULL,      -- (after - before) in the reference's standard deviations
    signals      TEXT    NOT NULL CHECK (json_valid(signals)),  -- the signals that moved with it
    changed      TEXT    NOT NULL CHECK (json_valid(changed)),  -- what changed at that point
    recorded_at  TEXT    NOT NULL
) STRICT;
CREATE INDEX detections_by_source ON detections (feed, source, metric);

CREATE VIEW recent_detections AS
SELECT seq, recorded_at, kind, feed, source, scope, metric, began, noticed, began_at, points,
       round(before, 3) AS before, round(after, 3) AS after, round(size_sd, 2) AS size_sd,
       (SELECT group_concat(json_extract(c.value, '$.what') || ' ' || coalesce(json_extract(c.value, '$.from'), '∅')
                            || ' → ' || coalesce(json_extract(c.value, '$.to'), '∅'), '; ')
          FROM json_each(detections.changed) c) AS what_changed,
       (SELECT group_concat(json_extract(s.value, '$.signal'), ', ') FROM json_each(detections.signals) s)
         AS signals_moved
FROM detections ORDER BY seq DESC;

-- what the feeds read: the points after their position, in order (a source's scores
-- are read by their primary key)
CREATE INDEX trials_by_seq ON trials (source, seq);
CREATE INDEX trajectories_by_seq ON trajectories (source, seq);
