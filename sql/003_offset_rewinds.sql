-- Audit trail of `drainer rewind`: who moved which committed offset, from where to where, and why.
CREATE TABLE offset_rewinds (
    id            bigserial PRIMARY KEY,
    drain         text NOT NULL REFERENCES drains (name),
    topic         text NOT NULL,
    partition     integer NOT NULL,
    from_offset   bigint NOT NULL,
    from_map      text NOT NULL,
    to_offset     bigint NOT NULL,
    requested_by  text NOT NULL,
    reason        text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX offset_rewinds_drain ON offset_rewinds (drain, topic, partition, created_at);
