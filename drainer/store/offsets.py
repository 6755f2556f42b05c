"""Per partition: the committed offset and offset map, their Kafka mirror, audited rewinds.

Postgres is the source of truth. Offsets move only by compare-and-set from the value a plan
started from, or by an audited rewind under the drain's lease.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, text

from drainer.level_topics import topic_level
from drainer.offset_map import PartitionProgress


def partition_offsets(conn: Connection, drain: str) -> dict[tuple[str, int], PartitionProgress]:
    """(topic, partition) -> the progress of every partition that has any."""
    rows = conn.execute(
        text(
            "SELECT topic, partition, committed, offset_map FROM partition_offsets WHERE drain = :d"
        ),
        {"d": drain},
    )
    return {
        (r.topic, r.partition): PartitionProgress.from_stored(r.committed, r.offset_map)
        for r in rows
    }


def insert_initial_offsets(
    conn: Connection, drain: str, initial_offsets: dict[tuple[str, int], int]
) -> None:
    """First progress row of partitions a plan covers for the first time (never overwrites).

    One executemany, which psycopg sends pipelined: a round trip per statement was most of
    the cost of planning a drain's first run of many partitions (3 x 64: 192 of them)."""
    rows = [
        {"d": drain, "t": topic, "l": topic_level(topic), "p": partition, "c": committed}
        for (topic, partition), committed in initial_offsets.items()
    ]
    if rows:
        conn.execute(
            text(
                "INSERT INTO partition_offsets (drain, topic, level, partition, committed) "
                "VALUES (:d, :t, :l, :p, :c) ON CONFLICT DO NOTHING"
            ),
            rows,
        )


def compare_and_set(
    conn: Connection,
    drain: str,
    topic: str,
    partition: int,
    expected: PartitionProgress,
    new: PartitionProgress,
) -> bool:
    """Move a partition's progress to `new` only if it still is `expected` (as stored)."""
    updated = conn.execute(
        text(
            "UPDATE partition_offsets SET committed = :c, offset_map = :m, updated_at = now() "
            "WHERE drain = :d AND topic = :t AND partition = :p "
            "AND committed = :c0 AND offset_map = :m0"
        ),
        {
            "c": new.committed,
            "m": new.encoded(),
            "d": drain,
            "t": topic,
            "p": partition,
            "c0": expected.committed,
            "m0": expected.encoded(),
        },
    ).rowcount
    return updated == 1


def unmirrored(
    conn: Connection, drain: str, levels: list[int], run_id: int | None = None, refresh_s: int = 0
) -> Sequence[Row[Any]]:
    """Partitions whose Kafka group offset differs from Postgres, and the partitions of
    `levels` that run `run_id` left records waiting in or that were last mirrored over
    `refresh_s` seconds ago (or never).

    `rewound` is true where a rewind moved the committed offset below what was mirrored, so
    moving the group back is what the audited rewind asked for.
    """
    return conn.execute(
        text(
            "SELECT topic, level, partition, committed, offset_map, "
            "coalesce(mirrored_offset > committed, false) AS rewound FROM partition_offsets "
            "WHERE drain = :d AND (mirrored_offset IS DISTINCT FROM committed "
            "OR mirrored_map IS DISTINCT FROM offset_map OR (level = ANY(:levels) AND ("
            "  mirrored_at IS NULL OR mirrored_at < now() - make_interval(secs => :refresh) "
            "  OR level IN (SELECT level FROM run_levels "
            "               WHERE run_id = :r AND backlog_before > planned))))"
        ),
        {"d": drain, "levels": list(levels), "r": run_id, "refresh": refresh_s},
    ).all()


def mark_mirrored(conn: Connection, drain: str, positions: Sequence[tuple[str, int, int]]) -> None:
    """Record that Kafka has each (topic, partition, offset) (unless Postgres moved on
    meanwhile); one executemany, sent pipelined, not a round trip per partition."""
    if not positions:
        return
    conn.execute(
        text(
            "UPDATE partition_offsets SET mirrored_offset = :c, mirrored_map = offset_map, "
            "mirrored_at = now() "
            "WHERE drain = :d AND topic = :t AND partition = :p AND committed = :c"
        ),
        [
            {"c": offset, "d": drain, "t": topic, "p": partition}
            for topic, partition, offset in positions
        ],
    )


def rewind_partition(
    conn: Connection,
    drain: str,
    topic: str,
    partition: int,
    current: PartitionProgress,
    target: int,
    reason: str | None,
    topic_id: str | None = None,
) -> None:
    """Set a partition's committed offset (clearing its map) and audit who, when and why."""
    conn.execute(
        text(
            "INSERT INTO partition_offsets (drain, topic, level, partition, committed, offset_map) "
            "VALUES (:d, :t, :l, :p, :c, '') ON CONFLICT (drain, topic, partition) "
            "DO UPDATE SET committed = :c, offset_map = '', updated_at = now()"
        ),
        {"d": drain, "t": topic, "l": topic_level(topic), "p": partition, "c": target},
    )
    conn.execute(
        text(
            "INSERT INTO offset_rewinds (drain, topic, partition, from_offset, from_map, "
            "to_offset, requested_by, reason, topic_id) "
            "VALUES (:d, :t, :p, :f, :fm, :to, :who, :why, :tid)"
        ),
        {
            "d": drain,
            "t": topic,
            "p": partition,
            "f": current.committed,
            "fm": current.encoded(),
            "to": target,
            "who": getpass.getuser(),
            "why": reason,
            "tid": topic_id,
        },
    )


def unexplained_regressions(conn: Connection, drain: str) -> Sequence[Row[Any]]:
    """Committed runs whose start offset is below the previous run's, with no rewind between."""
    return conn.execute(
        text(
            "WITH starts AS ("
            "  SELECT rr.topic, rr.partition, r.id, rr.start_offset,"
            "         lag(rr.start_offset) OVER (PARTITION BY rr.topic, rr.partition ORDER BY r.id) AS prev,"
            "         lag(r.committed_at) OVER (PARTITION BY rr.topic, rr.partition ORDER BY r.id) AS prev_at"
            "  FROM run_ranges rr JOIN runs r ON r.id = rr.run_id"
            "  WHERE r.drain = :d AND r.status = 'committed')"
            " SELECT s.topic, s.partition, s.id, s.prev, s.start_offset FROM starts s"
            " WHERE s.start_offset < s.prev AND NOT EXISTS ("
            "   SELECT 1 FROM offset_rewinds w WHERE w.drain = :d AND w.topic = s.topic"
            "   AND w.partition = s.partition AND w.created_at > s.prev_at)"
        ),
        {"d": drain},
    ).all()
