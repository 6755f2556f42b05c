-- The rows a committed run published to its sink, kept so that a launch which shares the run
-- (a sibling of a Dagster backfill, say) reports them as the launch that ran it did, not 0.
-- Null for runs committed before this migration.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS published_rows bigint;
