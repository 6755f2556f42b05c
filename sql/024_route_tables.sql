-- The tables a routed sink made (issue 49: one topic, many tables): registered before a run
-- writes them, so a resumed run sees them as the drain's (the max_tables cap takes the same
-- names again), the commit publishes and `drainer maintain` keeps each of them.
CREATE TABLE IF NOT EXISTS route_tables (
    drain text NOT NULL,
    name text NOT NULL,
    first_run_id bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (drain, name)
);
