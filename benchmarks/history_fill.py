"""Synthetic run history, written straight into the state tables (benchmarks and tests).

`fill_history` gives a drain `runs` committed runs, one every `every_s` seconds and ending
`age_days` ago, as a drain that ran for that long would have left them: per run and level a
`run_levels` row, per level `ranges` `run_ranges` rows over `partitions` partitions (with the
records and bytes read, 100 bytes a record, as a commit stores them), and every
hundredth run a retention loss; every tenth run a dead letter (half of them published to the
DLQ topic) and an attempt count. `partition_offsets` gets a row per partition and level (past
every synthetic offset, so the attempt counts are of done records). One
SQL statement per table, so 100,000 runs take seconds, not hours.
"""

from __future__ import annotations

from sqlalchemy import Connection, text


def fill_history(
    conn: Connection,
    drain: str,
    topic: str,
    levels: int,
    runs: int,
    partitions: int,
    age_days: float = 0.0,
    every_s: float = 300.0,
    ranges: int = 2,
    offsets: bool = True,
) -> list[int]:
    """Write the history; returns the new run ids, oldest first.

    `offsets=False` leaves `partition_offsets` alone: for a drain whose topics are real, whose
    offsets must stay within what Kafka holds.
    """
    params = {
        "d": drain,
        "t": topic,
        "l": levels,
        "n": runs,
        "p": partitions,
        "age": age_days,
        "every": every_s,
        "k": ranges,
    }
    conn.execute(
        text(
            "INSERT INTO drains (name, topic, group_name, levels) VALUES (:d, :t, :t, :l) "
            "ON CONFLICT (name) DO NOTHING"
        ),
        params,
    )
    ids = list(
        conn.execute(
            text(
                "INSERT INTO runs (drain, status, levels, budget, mode, trigger, attempts, "
                "planned_at, started_at, committed_at, duration_s) "
                "SELECT :d, 'committed', (SELECT array_agg(l) FROM generate_series(0, CAST(:l AS int) - 1) l), "
                "100, 'dataframe', 'test', 1, at, at, at, 1.0 FROM ("
                "  SELECT g, now() - make_interval(secs => CAST(:age AS float8) * 86400 "
                "    + (CAST(:n AS int) - g) * CAST(:every AS float8)) AS at "
                "  FROM generate_series(1, CAST(:n AS int)) g ORDER BY g) s RETURNING id"
            ),
            params,
        ).scalars()
    )
    params["first"], params["last"] = ids[0], ids[-1]
    conn.execute(
        text(
            "INSERT INTO run_levels (run_id, level, reserved, burst, allocated, backlog_before, "
            "planned, drained, failed, dead_lettered, fill_ratio, backlog_after, "
            "lost_to_retention, read_bytes) "
            "SELECT r, l, 10, 0, 10, 100, 10, 10, 0, 0, 1.0, 90, "
            "CASE WHEN l = 0 AND r % 100 = 0 THEN 1 ELSE 0 END, "  # the retention losses below
            "1000 "
            "FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) r, generate_series(0, CAST(:l AS int) - 1) l"
        ),
        params,
    )
    conn.execute(
        text(
            "INSERT INTO run_ranges (run_id, topic, level, partition, start_offset, end_offset, "
            "records, read_records, read_bytes) "
            "SELECT r, :t || '-' || l, l, (r * :k + k) % :p, r * 10, r * 10 + 10, 10, 10, 1000 "
            "FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) r, generate_series(0, CAST(:l AS int) - 1) l, "
            "generate_series(0, least(CAST(:k AS int), CAST(:p AS int)) - 1) k"
        ),
        params,
    )
    conn.execute(
        text(
            "INSERT INTO retention_losses (run_id, drain, kind, topic, level, partition, "
            "first_offset, end_offset, records) "
            "SELECT r, :d, 'plan', :t || '-0', 0, r % :p, r * 10, r * 10 + 1, 1 "
            "FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) r WHERE r % 100 = 0"
        ),
        params,
    )
    conn.execute(
        text(
            'INSERT INTO dead_letters (drain, run_id, topic, level, partition, "offset", '
            "error, attempts, created_at, dlq_published_at) "
            "SELECT :d, r, :t || '-0', 0, r % :p, r * 10, 'synthetic', 3, at, "
            "CASE WHEN r % 20 = 0 THEN at END "
            "FROM runs, LATERAL (SELECT id AS r, committed_at AS at) x "
            "WHERE drain = :d AND id BETWEEN :first AND :last AND id % 10 = 0"
        ),
        params,
    )
    conn.execute(
        text(
            'INSERT INTO record_attempts (drain, topic, partition, "offset", attempts, '
            "last_error, updated_at) "
            "SELECT :d, :t || '-0', r % :p, r * 10 + 1, 1, 'synthetic', at "
            "FROM runs, LATERAL (SELECT id AS r, committed_at AS at) x "
            "WHERE drain = :d AND id BETWEEN :first AND :last AND id % 10 = 0"
        ),
        params,
    )
    if not offsets:
        conn.execute(text("ANALYZE runs, run_levels, run_ranges, dead_letters, record_attempts"))
        return ids
    conn.execute(
        text(
            "INSERT INTO partition_offsets (drain, topic, level, partition, committed) "
            "SELECT :d, :t || '-' || l, l, p, (SELECT max(id) FROM runs) * 10 + 10 "
            "FROM generate_series(0, CAST(:l AS int) - 1) l, generate_series(0, CAST(:p AS int) - 1) p "
            "ON CONFLICT DO NOTHING"
        ),
        params,
    )
    conn.execute(text("ANALYZE runs, run_levels, run_ranges, dead_letters, record_attempts"))
    return ids
