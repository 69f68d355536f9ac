-- Each score's present, numeric sub-scores by signal, as a JSON object in breakdown
-- order ({"landed":1.0,"tests":0.5,…}): what the change-point detectors feed on, kept
-- with the score instead of taken out of its event's whole payload at every pass
-- (store/scores.py signals_of computes the same text; this fills the scores already
-- projected, from their events).
ALTER TABLE scores ADD COLUMN signals TEXT;

UPDATE scores SET signals = (
    SELECT json_group_object(json_extract(b.value, '$.signal'), json(b.value -> '$.sub_score'))
    FROM events e, json_each(e.payload, '$.breakdown') b
    WHERE e.seq = scores.seq AND json_extract(b.value, '$.present')
      AND json_type(b.value, '$.sub_score') IN ('integer', 'real'));
