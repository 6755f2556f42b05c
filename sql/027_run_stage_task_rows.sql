-- The rows each task staged, written in the task's transaction with the rows themselves, so
-- the commit that publishes a stage sums them instead of counting the stage (a scan of every
-- staged row inside the commit transaction: 0.5 s of a 10M-row run here, issue 51). NULL for
-- a task recorded before this column existed: its stage is counted as before.
ALTER TABLE run_stage_tasks ADD COLUMN IF NOT EXISTS rows bigint;
