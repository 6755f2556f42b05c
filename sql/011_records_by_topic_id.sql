-- Attempt counts and dead letters belong to one topic, not to a name: a topic deleted and created
-- again starts its offsets from 0, so its record at offset 0 is another record than the old one.
-- Both are keyed by the Kafka topic id as well ('' where it was never known); rows from before
-- take the id recorded for their topic now.
ALTER TABLE record_attempts ADD COLUMN topic_id text NOT NULL DEFAULT '';
UPDATE record_attempts a SET topic_id = t.topic_id
    FROM drain_topics t WHERE t.drain = a.drain AND t.topic = a.topic;
ALTER TABLE record_attempts DROP CONSTRAINT record_attempts_pkey;
ALTER TABLE record_attempts ADD PRIMARY KEY (drain, topic, topic_id, partition, "offset");

ALTER TABLE dead_letters ADD COLUMN topic_id text NOT NULL DEFAULT '';
UPDATE dead_letters d SET topic_id = t.topic_id
    FROM drain_topics t WHERE t.drain = d.drain AND t.topic = d.topic;
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_drain_topic_partition_offset_key;
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_one_per_record
    UNIQUE (drain, topic, topic_id, partition, "offset");
