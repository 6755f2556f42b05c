-- Issue 18, a year unattended: run detail is pruned after a drain's `history_days`, its totals
-- are kept per day and level, and the queries every run makes stay flat in history length.

-- What pruned runs did, per drain, day (UTC, of the commit) and level: the lifetime totals.
CREATE TABLE run_totals (
    drain              text NOT NULL REFERENCES drains (name),
    day                date NOT NULL,
    level              integer NOT NULL,
    runs               integer NOT NULL,
    planned            bigint NOT NULL,
    drained            bigint NOT NULL,
    failed             bigint NOT NULL,
    dead_lettered      bigint NOT NULL,
    lost_to_retention  bigint NOT NULL,
    PRIMARY KEY (drain, day, level)
);

-- when history was last pruned after a commit (at most once an hour)
ALTER TABLE drains ADD COLUMN history_pruned_at timestamptz;

-- a dead letter and an abandon's audit row outlive the run they name (`drainer dlq` still lists
-- and retries the one, `plan_abandons` keeps the other's ranges)
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_run_id_fkey;
ALTER TABLE plan_abandons DROP CONSTRAINT plan_abandons_run_id_fkey;

-- every run's queries, by index whatever the history length
CREATE INDEX runs_drain_committed ON runs (drain, id DESC) WHERE status = 'committed';
CREATE INDEX dead_letters_unpublished ON dead_letters (drain, id) WHERE dlq_published_at IS NULL;
CREATE INDEX dead_letters_pending ON dead_letters (drain, id) WHERE retried_at IS NULL;
