-- State tables (issue 48): what a run's merge into a Postgres sink did, recorded by the same
-- transaction that merges (a Delta or Iceberg merge's counts travel with its table commit, in
-- run_commit_details). Column names as `drainer status --json` and Dagster metadata show them.
CREATE TABLE IF NOT EXISTS run_upsert_counts (
    run_id              bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    rows_inserted       bigint NOT NULL,
    rows_updated        bigint NOT NULL,
    rows_deleted        bigint NOT NULL,
    rows_skipped_older  bigint NOT NULL
);
