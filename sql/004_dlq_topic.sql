-- Dead letters are also published to the drain's `dlq_topic` when it has one; this marks which
-- ones were, so a failed publish is retried by the next run.
ALTER TABLE dead_letters ADD COLUMN dlq_published_at timestamptz;
