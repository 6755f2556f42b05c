-- Lakehouse sinks (docs/lakehouse.md): the Delta or Iceberg table commit a run made, recorded by
-- the run's Postgres commit itself, for `drainer status` and the Dagster asset's metadata.

CREATE TABLE run_table_commits (
    run_id       bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    format       text NOT NULL CHECK (format IN ('delta', 'iceberg')),
    location     text NOT NULL,   -- the Delta table's path, or catalog.namespace.table
    version      bigint NOT NULL, -- the Delta table version, or the Iceberg snapshot id
    files_added  bigint NOT NULL,
    bytes_added  bigint NOT NULL,
    rows_added   bigint NOT NULL
);
