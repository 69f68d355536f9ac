-- Migration 6: transcript facts by the seq of the event that brought them.
--
-- A scoring pass asks what arrived since its last look (`max(seq)`, then the rows
-- above it) to extend its window sums instead of rereading every fact after each
-- appended line; without this index both questions visit every row of the source.
CREATE INDEX transcript_facts_by_seq ON transcript_facts (source, seq);
