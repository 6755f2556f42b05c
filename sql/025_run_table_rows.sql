-- Rows per routed table (issue 49) for a Postgres sink: its commit transaction publishes each
-- table's stage and records the rows here (a Delta or Iceberg run's travel with its table
-- commit, in run_commit_details). `drainer run`, `drainer status` and Dagster show them.
CREATE TABLE IF NOT EXISTS run_table_rows (
    run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    table_name  text NOT NULL,
    rows        bigint NOT NULL,
    PRIMARY KEY (run_id, table_name)
);
