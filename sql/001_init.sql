-- drainer schema v1: drains, runs and their plans, per-level stats, partition offsets, dead letters.
-- Postgres is the source of truth for progress; Kafka group offsets only mirror it.

CREATE TABLE drains (
    name          text PRIMARY KEY,
    topic         text NOT NULL,
    group_name    text NOT NULL,
    levels        integer NOT NULL CHECK (levels >= 1),
    fence         bigint NOT NULL DEFAULT 0,      -- bumped by every run that takes the drain
    owner_run_id  bigint,                          -- run holding the fence, for `status`
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
    id             bigserial PRIMARY KEY,
    drain          text NOT NULL REFERENCES drains (name),
    status         text NOT NULL CHECK (status IN ('planned', 'running', 'committed', 'failed')),
    levels         integer[] NOT NULL,            -- the levels this run covers (a backfill: a subset)
    budget         integer NOT NULL,
    mode           text NOT NULL,
    trigger        text NOT NULL DEFAULT 'cli',   -- cli | dagster | schedule | sensor | test
    dagster_run_id text,
    attempts       integer NOT NULL DEFAULT 0,    -- executions of this plan (a resumed plan counts up)
    fence          bigint,
    error          text,
    planned_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz,
    committed_at   timestamptz,
    duration_s     double precision
);
CREATE INDEX runs_drain_id ON runs (drain, id DESC);
-- at most one uncommitted plan per drain: it is resumed, never replaced
CREATE UNIQUE INDEX runs_one_open_plan ON runs (drain) WHERE status <> 'committed';

CREATE TABLE run_levels (
    run_id          bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    level           integer NOT NULL,
    reserved        integer NOT NULL,
    burst           integer NOT NULL,
    allocated       integer NOT NULL,
    backlog_before  bigint NOT NULL,
    planned         integer NOT NULL,
    drained         integer,
    failed          integer,
    dead_lettered   integer,
    fill_ratio      double precision,
    backlog_after   bigint,
    PRIMARY KEY (run_id, level)
);

CREATE TABLE run_ranges (
    run_id        bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    topic         text NOT NULL,
    level         integer NOT NULL,
    partition     integer NOT NULL,
    start_offset  bigint NOT NULL,                -- the committed offset the plan started from
    end_offset    bigint NOT NULL,                -- exclusive
    start_map     text NOT NULL DEFAULT '',       -- the offset map the plan started from (CAS)
    records       integer NOT NULL,               -- pending records in [start, end)
    PRIMARY KEY (run_id, topic, partition)
);

CREATE TABLE partition_offsets (
    drain            text NOT NULL REFERENCES drains (name),
    topic            text NOT NULL,
    level            integer NOT NULL,
    partition        integer NOT NULL,
    committed        bigint NOT NULL,             -- every offset below is done
    offset_map       text NOT NULL DEFAULT '',    -- done offsets above `committed` (DESIGN §6)
    mirrored_offset  bigint,                      -- last value mirrored to the Kafka group
    mirrored_map     text,                        -- and the offset map mirrored with it
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (drain, topic, partition)
);

CREATE TABLE dead_letters (
    id          bigserial PRIMARY KEY,
    drain       text NOT NULL REFERENCES drains (name),
    run_id      bigint REFERENCES runs (id),
    topic       text NOT NULL,
    level       integer NOT NULL,
    partition   integer NOT NULL,
    "offset"    bigint NOT NULL,
    key         bytea,
    value       bytea,
    headers     jsonb,
    ts          timestamptz,
    error       text NOT NULL,
    attempts    integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    retried_at  timestamptz,
    UNIQUE (drain, topic, partition, "offset")
);
