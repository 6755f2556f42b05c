-- Issue 19, time-boxed runs and byte budgets: what each run read, in records and key+value bytes,
-- per range (partition) and per level. The next plans estimate record sizes per partition and the
-- drain's bytes/s from these; NULL where the run predates them or the executor did not measure.
ALTER TABLE run_ranges ADD COLUMN read_records bigint;
ALTER TABLE run_ranges ADD COLUMN read_bytes bigint;
ALTER TABLE run_levels ADD COLUMN read_bytes bigint;
