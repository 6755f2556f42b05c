-- An abandoned run keeps its launch key for the audit, but no longer holds it: the next launch of
-- the same request (a Dagster backfill run after `drainer plan abandon`) plans anew under that
-- key instead of failing on the unique index.
DROP INDEX runs_one_run_per_launch;
CREATE UNIQUE INDEX runs_one_run_per_launch ON runs (drain, launch_key)
    WHERE launch_key IS NOT NULL AND status <> 'abandoned';
