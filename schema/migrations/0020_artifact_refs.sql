-- The artifacts each effective record points at (#25), kept with the iteration when
-- its record changes, so a full scan lists them without decoding every record again:
-- a JSON array of [kind, raw path], NULL when it points at none.
ALTER TABLE iterations ADD COLUMN artifact_refs TEXT;
UPDATE iterations SET artifact_refs = (
    SELECT CASE WHEN json_array_length(a) > 0 THEN a END FROM (SELECT (SELECT json_group_array(json_array(k, p)) FROM (
            SELECT 'verifier_result' AS k, json_extract(v.value, '$.result_artifact') AS p
            FROM json_each(r.record, '$.verifiers') v
            UNION ALL SELECT 'review_decision', json_extract(r.record, '$.review.decision_artifact'))
          WHERE p IS NOT NULL AND p <> '' AND p <> 0) AS a
    FROM record_files r WHERE r.source = iterations.source AND r.file = iterations.file
      AND r.ordinal = iterations.ordinal));
