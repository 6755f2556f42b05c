-- Time-boxed runs (issue 19, `run_seconds`): the wall time of a run's whole slot, from the lease
-- to the end of its after-commit steps (plan, Spark, commit, mirror, dead letters, upkeep, the
-- backlog report). `duration_s` is taken inside the commit, so it cannot include the commit or
-- what follows it; `slot_s` is written by a small update after those steps, outside the commit's
-- transaction. NULL when the process ended between the commit and that update: throughput then
-- falls back to `duration_s` (drainer.store.throughput.recent_throughput).

ALTER TABLE runs ADD COLUMN slot_s double precision;
