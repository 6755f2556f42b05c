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


def recent_throughput(
    conn: Connection, drain: str, window: int
) -> list[tuple[int, float, int | None]]:
    """`(records, seconds, bytes)` (bytes None when unmeasured) of the last `window` committed
    runs that drained something, oldest first.

    `seconds` is the run's whole slot (`slot_s`: plan through commit, mirror and upkeep), or
    its pre-commit `duration_s` when the process ended before storing the slot.
    """
    rows = conn.execute(
        text(
            "SELECT * FROM ("
            "  SELECT r.id, coalesce(r.slot_s, r.duration_s) AS seconds,"
            "         coalesce(sum(rl.drained), 0) AS records,"
            "         sum(rl.read_bytes) AS bytes"
            "  FROM runs r JOIN run_levels rl ON rl.run_id = r.id"
            "  WHERE r.drain = :d AND r.status = 'committed'"
            "    AND coalesce(r.slot_s, r.duration_s) > 0"
            "  GROUP BY r.id HAVING coalesce(sum(rl.drained), 0) > 0"
            "  ORDER BY r.id DESC LIMIT :w"
            ") recent ORDER BY id"
        ),
        {"d": drain, "w": window},
    )
    return [(int(row.records), float(row.seconds), _int(row.bytes)) for row in rows]


def record_sizes(
    conn: Connection, drain: str, topics: list[str], window: int
) -> dict[tuple[str, int], float]:
    """Average key+value+header bytes per record of each partition of `topics`, over the last
    `window` committed runs that read it; partitions no measured run read are absent."""
    if not topics:
        return {}
    rows = conn.execute(
        text(
            "SELECT topic, partition, sum(read_bytes) AS bytes, sum(read_records) AS records "
            "FROM ("
            "  SELECT rr.topic, rr.partition, rr.read_bytes, rr.read_records,"
            "         row_number() OVER (PARTITION BY rr.topic, rr.partition"
            "                            ORDER BY rr.run_id DESC) AS n"
            "  FROM run_ranges rr JOIN runs r ON r.id = rr.run_id"
            "  WHERE r.drain = :d AND r.status = 'committed' AND rr.read_records > 0"
            "    AND rr.read_bytes IS NOT NULL AND rr.topic = ANY(:topics)"
            ") h WHERE n <= :w GROUP BY topic, partition"
        ),
        {"d": drain, "topics": topics, "w": window},
    )
    return {(row.topic, row.partition): float(row.bytes) / float(row.records) for row in rows}


def _int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
