-- The tasks that have staged rows into a Postgres stage table (drainer.store.sink_tables), one
-- row per (stage, task), written in the task's own transaction with its rows. A task's first
-- attempt finds no row of its own here and copies without deleting; only a retried task (or a
-- stage attempted again) deletes what its earlier attempt staged. The stage then needs no index
-- on its task column, whose upkeep doubled the cost of every COPY (issue 51).
CREATE TABLE IF NOT EXISTS run_stage_tasks (
    stage  text NOT NULL,
    task   text NOT NULL,
    PRIMARY KEY (stage, task)
);
