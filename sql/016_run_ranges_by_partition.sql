-- Issue 18, per-run cost flat in history length: a time-boxed or byte-budgeted plan reads each
-- partition's record size over its last few measured ranges (drainer.store.throughput
-- .record_sizes), walking this index newest first instead of sorting every range of the topic.
-- Not partial on read_records: the commit's update of the read counts stays a HOT update.
CREATE INDEX run_ranges_by_partition ON run_ranges (topic, partition, run_id DESC);
