-- One file-name grammar (names.py, #56): an iteration's side file is named with ASCII
-- digits and no leading zero, so iter-066.hook-outcomes.yaml or iter-６６.labels.yaml is
-- no iteration's. Older code took such a file for iteration 66's, in place of the
-- canonical one, and its removal then retracted the canonical file's outcome. The
-- projection now refuses every non-canonical side-file event (store/iterations.py); this
-- migration brings an older ledger's rows to what a rebuild would leave: each row that a
-- non-canonical file put there is derived again from the canonical file's latest event
-- (none when that file was removed since), and the non-canonical files' checkpoints are
-- dropped, so the next scan reads them as misnamed and quarantines them.
CREATE TEMP TABLE misnamed_sides AS
    SELECT 'hook_outcomes' AS kind, source, iteration FROM hook_outcomes
     WHERE file <> 'iter-' || iteration || '.hook-outcomes.yaml'
    UNION ALL
    SELECT 'labels', source, iteration FROM labels
     WHERE file <> 'iter-' || iteration || '.labels.yaml';

DELETE FROM hook_outcomes WHERE file <> 'iter-' || iteration || '.hook-outcomes.yaml';
DELETE FROM labels WHERE file <> 'iter-' || iteration || '.labels.yaml';

INSERT INTO hook_outcomes (source, iteration, file, outcome, records, error, content_hash, seq)
SELECT e.source, m.iteration, json_extract(e.payload, '$.file'), json_extract(e.payload, '$.outcome'),
       json_array_length(e.payload, '$.outcome.records'), json_extract(e.payload, '$.outcome.error'),
       e.content_hash, e.seq
  FROM misnamed_sides m JOIN events e ON e.seq = (
       SELECT max(seq) FROM events WHERE type = 'hook_outcomes.recorded' AND source = m.source
          AND json_extract(payload, '$.file') = 'iter-' || m.iteration || '.hook-outcomes.yaml')
 WHERE m.kind = 'hook_outcomes' AND NOT EXISTS (
       SELECT 1 FROM events r WHERE r.type = 'file.removed' AND r.source = m.source AND r.seq > e.seq
          AND json_extract(r.payload, '$.file') = 'iter-' || m.iteration || '.hook-outcomes.yaml');

INSERT INTO labels (source, iteration, file, outcome, labels, error, content_hash, seq)
SELECT e.source, m.iteration, json_extract(e.payload, '$.file'), json_extract(e.payload, '$.outcome'),
       json_array_length(e.payload, '$.outcome.labels'), json_extract(e.payload, '$.outcome.error'),
       e.content_hash, e.seq
  FROM misnamed_sides m JOIN events e ON e.seq = (
       SELECT max(seq) FROM events WHERE type = 'labels.recorded' AND source = m.source
          AND json_extract(payload, '$.file') = 'iter-' || m.iteration || '.labels.yaml')
 WHERE m.kind = 'labels' AND NOT EXISTS (
       SELECT 1 FROM events r WHERE r.type = 'file.removed' AND r.source = m.source AND r.seq > e.seq
          AND json_extract(r.payload, '$.file') = 'iter-' || m.iteration || '.labels.yaml');

INSERT INTO pending (source, kind, key) SELECT source, 'iteration', CAST(iteration AS TEXT) FROM misnamed_sides;

CREATE TEMP TABLE side_numbers AS
    SELECT source, path, substr(path, 6, length(path) - 5 - length(CASE kind WHEN 'hook_outcomes'
           THEN '.hook-outcomes.yaml' ELSE '.labels.yaml' END)) AS n
      FROM source_checkpoints WHERE kind IN ('hook_outcomes', 'labels');
DELETE FROM source_checkpoints WHERE (source, path) IN (
    SELECT source, path FROM side_numbers WHERE n = '' OR n GLOB '*[^0-9]*' OR n GLOB '0?*');
DROP TABLE side_numbers;
DELETE FROM scan_marks;
DROP TABLE misnamed_sides;
