"""Offsets Kafka deleted before the drain processed them (retention), per run, level, partition.

Rows are written with the plan (retention passed a committed offset) or when a run starts
reading (retention ate into its planned ranges), and count once the run commits: the commit
applies a row's move of the committed offset by compare-and-set and sums the rows per level.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from drainer.offset_map import PartitionProgress


@dataclass(frozen=True)
class Loss:
    """Offsets [first, end) of a partition that Kafka deleted; `records` of them were not done.

    kind 'committed' also carries the stored progress the partition moves from and to.
    """

    kind: str
    topic: str
    level: int
    partition: int
    first: int
    end: int
    records: int
    moved_from: PartitionProgress | None = None
    moved_to: PartitionProgress | None = None


def record_losses(conn: Connection, drain: str, run_id: int, kind: str, losses: list[Loss]) -> None:
    """Replace the run's losses of one kind (a resumed run measures its ranges again)."""
    conn.execute(
        text("DELETE FROM retention_losses WHERE run_id = :r AND kind = :k"),
        {"r": run_id, "k": kind},
    )
    if not losses:
        return
    conn.execute(
        text(
            "INSERT INTO retention_losses (run_id, drain, kind, topic, level, partition, "
            "first_offset, end_offset, records, from_offset, from_map, to_offset, to_map) "
            "VALUES (:r, :d, :k, :t, :l, :p, :first, :end, :n, :fo, :fm, :to, :tm)"
        ),
        [
            {
                "r": run_id,
                "d": drain,
                "k": kind,
                "t": x.topic,
                "l": x.level,
                "p": x.partition,
                "first": x.first,
                "end": x.end,
                "n": x.records,
                "fo": x.moved_from.committed if x.moved_from else None,
                "fm": x.moved_from.encoded() if x.moved_from else None,
                "to": x.moved_to.committed if x.moved_to else None,
                "tm": x.moved_to.encoded() if x.moved_to else None,
            }
            for x in losses
        ],
    )


def run_losses(conn: Connection, run_id: int) -> list[Loss]:
    rows = conn.execute(
        text(
            "SELECT kind, topic, level, partition, first_offset, end_offset, records, "
            "from_offset, from_map, to_offset, to_map FROM retention_losses "
            "WHERE run_id = :r ORDER BY kind, topic, partition"
        ),
        {"r": run_id},
    )
    return [
        Loss(
            r.kind,
            r.topic,
            r.level,
            r.partition,
            r.first_offset,
            r.end_offset,
            r.records,
            None
            if r.from_offset is None
            else PartitionProgress.from_stored(r.from_offset, r.from_map),
            None if r.to_offset is None else PartitionProgress.from_stored(r.to_offset, r.to_map),
        )
        for r in rows
    ]


def committed_losses(conn: Connection, drain: str, limit: int = 50) -> list[dict[str, Any]]:
    """Losses of the drain's committed runs, newest first: what `drainer status` shows."""
    rows = conn.execute(
        text(
            "SELECT x.run_id, x.kind, x.topic, x.level, x.partition, x.first_offset, "
            "x.end_offset, x.records, r.committed_at FROM retention_losses x "
            "JOIN runs r ON r.id = x.run_id WHERE x.drain = :d AND r.status = 'committed' "
            "ORDER BY x.run_id DESC, x.topic, x.partition LIMIT :n"
        ),
        {"d": drain, "n": limit},
    ).mappings()
    return [dict(row) for row in rows]


def total_lost(conn: Connection, drain: str) -> dict[int, int]:
    """Level -> offsets lost to retention over the drain's committed runs.

    Runs pruned by history retention count through their daily totals (`run_totals`).
    """
    rows = conn.execute(
        text(
            "SELECT level, sum(n) AS n FROM ("
            "  SELECT x.level, x.records AS n FROM retention_losses x "
            "  JOIN runs r ON r.id = x.run_id WHERE x.drain = :d AND r.status = 'committed' "
            "  UNION ALL SELECT level, lost_to_retention FROM run_totals WHERE drain = :d"
            ") lost GROUP BY level HAVING sum(n) > 0"
        ),
        {"d": drain},
    )
    found: dict[int, int] = defaultdict(int)
    for r in rows:
        found[r.level] = int(r.n)
    return dict(found)
