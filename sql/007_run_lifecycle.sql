-- Issue 8, run lifecycle: offsets lost to Kafka retention, abandoned plans, topic identities.

-- Offsets that Kafka deleted before the drain processed them, per run, level and partition.
-- kind 'committed': retention passed the partition's committed offset (found when planning);
-- kind 'plan': retention deleted part of a planned range before the run read it.
-- A row counts once its run is committed; the rows of an abandoned plan count nothing.
CREATE TABLE retention_losses (
    id            bigserial PRIMARY KEY,
    run_id        bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    drain         text NOT NULL REFERENCES drains (name),
    kind          text NOT NULL CHECK (kind IN ('committed', 'plan')),
    topic         text NOT NULL,
    level         integer NOT NULL,
    partition     integer NOT NULL,
    first_offset  bigint NOT NULL,                -- the lost offsets are [first_offset, end_offset)
    end_offset    bigint NOT NULL,
    records       bigint NOT NULL,                -- offsets in that range not already done
    from_offset   bigint,                         -- kind 'committed': the stored value it moves from
    from_map      text,                           --   (compare-and-set at commit)
    to_offset     bigint,                         -- and the value it moves to
    to_map        text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, kind, topic, partition)
);
CREATE INDEX retention_losses_drain ON retention_losses (drain, run_id);

ALTER TABLE run_levels ADD COLUMN lost_to_retention bigint;

-- `drainer plan abandon`: an open plan ended without committing anything, audited.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('planned', 'running', 'committed', 'failed', 'abandoned'));
DROP INDEX runs_one_open_plan;
CREATE UNIQUE INDEX runs_one_open_plan ON runs (drain) WHERE status NOT IN ('committed', 'abandoned');

CREATE TABLE plan_abandons (
    id            bigserial PRIMARY KEY,
    drain         text NOT NULL REFERENCES drains (name),
    run_id        bigint NOT NULL REFERENCES runs (id),
    status        text NOT NULL,                  -- the run's status when it was abandoned
    attempts      integer NOT NULL,
    last_error    text,
    ranges        jsonb NOT NULL,                 -- [{topic, partition, start, end, records}]
    requested_by  text NOT NULL,
    reason        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX plan_abandons_drain ON plan_abandons (drain, created_at);

-- The Kafka topic id of each level topic a drain has read: a recreated topic (same name, new id)
-- stops the drain until an audited rewind accepts the new topic.
CREATE TABLE drain_topics (
    drain        text NOT NULL REFERENCES drains (name),
    topic        text NOT NULL,
    topic_id     text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (drain, topic)
);

-- rewinds now also say which kind (to an offset, a time, the earliest) and the topic id accepted
ALTER TABLE offset_rewinds ADD COLUMN topic_id text;
