-- The columns a run added to its sink table (new optional fields of the records, issue 28):
-- audited with the run, shown by `drainer status` and in the Dagster materialization.
-- 020, not 019: 019 is main's (019_mirror_time.sql), merged after this branch began.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS columns_added text[] NOT NULL DEFAULT '{}';
