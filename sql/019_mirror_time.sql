-- When each partition's offset was last mirrored to its Kafka group: an empty level is committed
-- again only when its last mirror is old (drainer.lifecycle.mirror.REFRESH_S), not after every
-- run (the whole cost of an empty run's mirror).
ALTER TABLE partition_offsets ADD COLUMN IF NOT EXISTS mirrored_at timestamptz;
