-- Kafka sink (docs/kafka-sink.md): a run's Kafka transaction is recorded like a table commit
-- (location: the output topic; version: the offset of the run's marker), and what it produced
-- per topic, its transactional id and the attempts before it in `run_commit_details`.
-- 018, not 017: 017 is issue 26's (runs.nonce, run_table_proofs), merged on its own branch; a
-- shared development database must not record 017 for this file and then skip that one.
ALTER TABLE run_table_commits DROP CONSTRAINT IF EXISTS run_table_commits_format_check;
ALTER TABLE run_table_commits ADD CONSTRAINT run_table_commits_format_check
    CHECK (format IN ('delta', 'iceberg', 'kafka'));
CREATE TABLE IF NOT EXISTS run_commit_details (
    run_id   bigint PRIMARY KEY REFERENCES run_table_commits (run_id) ON DELETE CASCADE,
    details  jsonb NOT NULL
);
