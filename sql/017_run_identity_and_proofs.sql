-- Lakehouse exactly once that survives maintenance, abandon and a restored database (issue 26).
--
-- runs.nonce: a random identity per run, carried in every table commit's marker (Delta app id
-- and userMetadata, Iceberg WAP id and snapshot properties). A state database restored to an
-- earlier point reissues run ids; it never reissues nonces, so an old table commit is never
-- taken for a new run. Runs planned before this migration keep NULL: their markers had none.
ALTER TABLE runs ADD COLUMN nonce text;
ALTER TABLE runs ALTER COLUMN nonce SET DEFAULT replace(gen_random_uuid()::text, '-', '');

-- The table commit of a run, recorded the moment the executor sees it (before the run's Postgres
-- commit), with the attempt whose write landed: a proof that no snapshot expiry, log clean-up
-- or catalog of its own can take away. run_table_commits keeps what the commit recorded.
CREATE TABLE run_table_proofs (
    run_id   bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    attempt  integer NOT NULL,
    commit   jsonb NOT NULL,
    seen_at  timestamptz NOT NULL DEFAULT now()
);

-- Staged failures belong to the attempt that staged them: the Postgres commit takes those of
-- the attempt whose write landed (for a table sink, perhaps an earlier attempt's).
ALTER TABLE record_failures ADD COLUMN attempt integer NOT NULL DEFAULT 0;
ALTER TABLE record_failures DROP CONSTRAINT record_failures_pkey;
ALTER TABLE record_failures ADD PRIMARY KEY (run_id, attempt, topic, partition, "offset");
