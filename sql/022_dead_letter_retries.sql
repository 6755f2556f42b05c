-- `drainer dlq retry` hands dead letters to their own drain only: it marks them requested (with
-- a fixed value, when given) instead of producing them to the shared level topic again, and the
-- drain's next plan claims them (retry_run_id) in the transaction that stores it, so a resumed
-- run processes the same ones. The run's commit marks each retried, or dead again.
ALTER TABLE dead_letters
    ADD COLUMN IF NOT EXISTS retry_requested_at timestamptz,
    ADD COLUMN IF NOT EXISTS retry_value bytea,
    ADD COLUMN IF NOT EXISTS retry_run_id bigint;
CREATE INDEX IF NOT EXISTS dead_letters_retry_requested ON dead_letters (drain, level)
    WHERE retry_requested_at IS NOT NULL AND retry_run_id IS NULL AND retried_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_retry_run ON dead_letters (retry_run_id)
    WHERE retry_run_id IS NOT NULL;
