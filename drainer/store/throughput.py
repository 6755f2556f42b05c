"""What runs read, in records and bytes: the input of time-boxed runs and byte budgets.

The commit stores each range's records and key+value+header bytes read (`run_ranges.read_records`,
`read_bytes`) and each level's bytes (`run_levels.read_bytes`); after the run's after-commit steps
a small update stores its whole slot's wall time (`store_slot`, `runs.slot_s`). Planning reads
back the drain's recent throughput (records over `slot_s`) and each partition's average record
size.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, text


def store_read(
    conn: Connection,
    run_id: int,
    read: Iterable[tuple[str, int, int, int, int | None]],
) -> None:
    """Per range `(topic, level, partition, records, bytes)` read; level bytes are their sum.

    `bytes` None: the executor did not measure them (the range and level stay NULL).
    """
    rows = list(read)
    if not rows:
        return
    conn.execute(
        text(
            "UPDATE run_ranges SET read_records = :n, read_bytes = :b "
            "WHERE run_id = :r AND topic = :t AND partition = :p"
        ),
        [{"r": run_id, "t": t, "p": p, "n": n, "b": b} for t, _, p, n, b in rows],
    )
    by_level: dict[int, int] = {}
    for _, level, _, _, size in rows:
        if size is not None:
            by_level[level] = by_level.get(level, 0) + size
    if by_level:
        conn.execute(
            text("UPDATE run_levels SET read_bytes = :b WHERE run_id = :r AND level = :l"),
            [{"r": run_id, "l": level, "b": size} for level, size in by_level.items()],
        )


def store_slot(conn: Connection, run_id: int, seconds: float) -> None:
    """The run's wall time through its after-commit steps (`runs.slot_s`).

    Its own statement after the commit, not part of it: the commit's transaction stays as short
    as it was, and a run whose process ends before this keeps its pre-commit `duration_s`.
    """
    conn.execute(
        text("UPDATE runs SET slot_s = :s WHERE id = :r"), {"s": round(seconds, 3), "r": run_id}
    )


def last_read_had_gaps(conn: Connection, drain: str) -> bool:
    """Whether the drain's latest committed run read fewer records from a range than its
    offsets span: transaction markers, aborted or compacted records (or records its offset map
    or retention skipped). The next run then counts each partition's records itself
    (`spark_jobs.kafka_source.counted`); a drain without gaps has them from its total."""
    return bool(
        conn.scalar(
            text(
                "SELECT EXISTS (SELECT 1 FROM run_ranges WHERE run_id = ("
                "  SELECT max(id) FROM runs WHERE drain = :d AND status = 'committed')"
                " AND read_records < end_offset - start_offset)"
            ),
            {"d": drain},
        )
    )


def recent_throughput(
    conn: Connection, drain: str, window: int
) -> list[tuple[int, float, int | None, int | None]]:
    """`(records, seconds, bytes, budget)` (bytes None when unmeasured; budget the record
    budget the run was planned with) of the last `window` committed runs that drained
    something, oldest first.

    `seconds` is the run's whole slot (`slot_s`: plan through commit, mirror and upkeep), or
    its pre-commit `duration_s` when the process ended before storing the slot.
    """
    # walk the drain's committed runs newest first (an index) and sum each one's levels by key,
    # stopping at the window: flat in history length under any plan (a join of runs and
    # run_levels grouped by run merge-joined every run's levels, 0.3 s at 100,000 runs). The
    # window is a literal: a generic plan that knows it is small costs too little for JIT
    rows = conn.execute(
        text(
            "SELECT * FROM ("
            "  SELECT r.id, coalesce(r.slot_s, r.duration_s) AS seconds, l.records, l.bytes,"
            "  r.budget"
            "  FROM runs r CROSS JOIN LATERAL ("
            "    SELECT coalesce(sum(rl.drained), 0) AS records, sum(rl.read_bytes) AS bytes"
            "    FROM run_levels rl WHERE rl.run_id = r.id) l"
            "  WHERE r.drain = :d AND r.status = 'committed'"
            "    AND coalesce(r.slot_s, r.duration_s) > 0 AND l.records > 0"
            f"  ORDER BY r.id DESC LIMIT {int(window)}"
            ") recent ORDER BY id"
        ),
        {"d": drain},
    )
    return [
        (int(row.records), float(row.seconds), _int(row.bytes), _int(row.budget)) for row in rows
    ]


def record_sizes(
    conn: Connection, drain: str, topics: list[str], window: int
) -> dict[tuple[str, int], float]:
    """Average key+value+header bytes per record of each partition of `topics`, over the last
    `window` committed runs that read it; partitions no measured run read are absent (as are
    partitions the drain has committed no offset of: a run that read one committed it)."""
    if not topics:
        return {}
    # per partition the drain has committed (partition_offsets), walk its ranges newest first
    # (index run_ranges_by_partition) and stop at the window: flat in history length. Numbering
    # every range of the topics instead sorted all of them, 1.2 s at 100,000 runs (3 s as a
    # generic plan). The window is a literal, as above.
    rows = conn.execute(
        text(
            "SELECT po.topic, po.partition, sum(h.read_bytes) AS bytes,"
            "       sum(h.read_records) AS records"
            " FROM partition_offsets po CROSS JOIN LATERAL ("
            "  SELECT rr.read_bytes, rr.read_records FROM run_ranges rr"
            "  WHERE rr.topic = po.topic AND rr.partition = po.partition"
            "    AND rr.read_records > 0 AND rr.read_bytes IS NOT NULL"
            "    AND EXISTS (SELECT 1 FROM runs r WHERE r.id = rr.run_id"
            "                AND r.drain = :d AND r.status = 'committed')"
            f"  ORDER BY rr.run_id DESC LIMIT {int(window)}"
            ") h WHERE po.drain = :d AND po.topic = ANY(:topics)"
            " GROUP BY po.topic, po.partition"
        ),
        {"d": drain, "topics": topics},
    )
    return {(row.topic, row.partition): float(row.bytes) / float(row.records) for row in rows}


def _int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
