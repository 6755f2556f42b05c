-- Launches that must be one drainer run (a Dagster backfill split into several Dagster runs), and
-- the time each run spent in its phases.

-- The launch a run belongs to (e.g. `dagster-backfill:<id>`): every launch of a backfill finds
-- the one run that drained the backfill's levels instead of draining again.
ALTER TABLE runs ADD COLUMN launch_key text;
CREATE UNIQUE INDEX runs_one_run_per_launch ON runs (drain, launch_key) WHERE launch_key IS NOT NULL;

-- Seconds per phase of the run's last attempt: plan, spark_start, spark_job, commit, mirror.
ALTER TABLE runs ADD COLUMN phases jsonb;
