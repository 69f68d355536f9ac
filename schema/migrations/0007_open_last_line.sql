-- Migration 7: a tailed file whose last consumed line had no newline yet.
--
-- A transcript's final line counts once it is one complete JSON object, newline or
-- not (the rubric reads a final line that lacks `\n`). The checkpoint then remembers
-- that line ("<length>:<sha256>") so that the newline arriving later does not count
-- it twice, and bytes that turn out to continue it replace what it gave.
ALTER TABLE source_checkpoints ADD COLUMN open_line TEXT;
