-- Record mode (DESIGN §7): per-record failures staged by Spark tasks, attempts across runs.

-- Written by Spark tasks for records that are NOT done in a run (failed or held back); every
-- other record of the run's ranges is done. Keyed by run so a retried task replaces its rows.
CREATE TABLE record_failures (
    run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    topic       text NOT NULL,
    partition   integer NOT NULL,
    "offset"    bigint NOT NULL,
    held_back   boolean NOT NULL,                 -- not attempted: an earlier record of its key/partition failed
    key         bytea,
    value       bytea,
    headers     jsonb,
    ts          timestamptz,
    error       text,
    PRIMARY KEY (run_id, topic, partition, "offset")
);

CREATE TABLE record_attempts (
    drain       text NOT NULL REFERENCES drains (name),
    topic       text NOT NULL,
    partition   integer NOT NULL,
    "offset"    bigint NOT NULL,
    attempts    integer NOT NULL,
    last_error  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (drain, topic, partition, "offset")
);
