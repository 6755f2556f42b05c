"""Every benchmark path's output read back by a reader that is not the path's own (issue 51).

Each reader returns, per source partition `(topic, partition)`, what it found: (rows, distinct
offsets, lowest offset, highest offset), which `fair.Expected.check` compares with the source.
- Kafka: a `read_committed` confluent-kafka consumer; the source coordinate of each record is
  its `drainer.source` header (`topic/partition/offset`), which drainer's sink writes and every
  Kafka peer is given too.
- Delta: `deltalake`; Iceberg: `pyiceberg` on drainer's catalog; both counted with pyarrow.
- Postgres: psycopg, counted by the database.
Table outputs carry the coordinates as columns `topic`, `partition`, `offset`.
"""

from __future__ import annotations

import uuid
from typing import Any

Found = dict[tuple[str, int], tuple[int, int, int, int]]
SOURCE_HEADER = "drainer.source"
COLUMNS = ["topic", "partition", "offset"]


def kafka(topic: str, expected: Any) -> Found:
    """Records of `topic` a `read_committed` consumer sees, by their source coordinates.
    Distinct offsets are counted in a bitmap per source partition (10M records: 10 MB)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from drainer.settings import load_settings

    consumer = Consumer(
        {
            "bootstrap.servers": load_settings().bootstrap_servers,
            "group.id": f"readback-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    seen = {key: bytearray(high - low) for key, (low, high) in expected.ranges.items()}
    rows: dict[tuple[str, int], int] = {}
    outside: dict[tuple[str, int], set[int]] = {}
    lowest: dict[tuple[str, int], int] = {}
    highest: dict[tuple[str, int], int] = {}
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        open_parts = set(parts)
        while open_parts:
            for msg in consumer.consume(10_000, 10):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(msg.partition())
                        continue
                    raise RuntimeError(f"reading {topic} back: {msg.error()}")
                source = dict(msg.headers() or []).get(SOURCE_HEADER)
                if source is None:
                    raise SystemExit(f"{topic}: a record without a {SOURCE_HEADER} header")
                src_topic, partition, offset = source.decode().rsplit("/", 2)
                key, at = (src_topic, int(partition)), int(offset)
                rows[key] = rows.get(key, 0) + 1
                lowest[key] = min(lowest.get(key, at), at)
                highest[key] = max(highest.get(key, at), at)
                low, high = expected.ranges.get(key, (0, 0))
                if low <= at < high:
                    seen[key][at - low] = 1
                else:
                    outside.setdefault(key, set()).add(at)
    finally:
        consumer.close()
    return {
        key: (
            n,
            (seen[key].count(1) if key in seen else 0) + len(outside.get(key, ())),
            lowest[key],
            highest[key],
        )
        for key, n in rows.items()
    }


def _arrow(table: Any, prefix: str = "") -> Found:
    """Counted per source partition; `prefix`: the coordinate columns' (`_topic`, ... for a
    drain without a processor)."""
    table = table.select([prefix + c for c in COLUMNS]).rename_columns(COLUMNS)
    grouped = table.group_by(["topic", "partition"]).aggregate(
        [
            ("offset", "count"),
            ("offset", "count_distinct"),
            ("offset", "min"),
            ("offset", "max"),
        ]
    )
    return {
        (row["topic"], int(row["partition"])): (
            int(row["offset_count"]),
            int(row["offset_count_distinct"]),
            int(row["offset_min"]),
            int(row["offset_max"]),
        )
        for row in grouped.to_pylist()
    }


def delta(location: str, prefix: str = "") -> Found:
    from deltalake import DeltaTable

    columns = [prefix + c for c in COLUMNS]
    return _arrow(DeltaTable(location).to_pyarrow_dataset().to_table(columns=columns), prefix)


def iceberg(table: str, database_url: str | None = None) -> Found:
    """`table` as drainer's catalog names it (`namespace.name`); `database_url`: the catalog's
    database when not this environment's."""
    from pyiceberg.catalog.sql import SqlCatalog

    from drainer.settings import load_settings

    catalog = SqlCatalog("drainer", uri=database_url or load_settings().database_url)
    return _arrow(catalog.load_table(table).scan(selected_fields=tuple(COLUMNS)).to_arrow())


def postgres(table: str, database_url: str | None = None) -> Found:
    import psycopg
    from psycopg import sql

    from drainer.settings import load_settings, psycopg_url

    query = sql.SQL(
        'SELECT topic, "partition", count(*), count(DISTINCT "offset"), min("offset"), '
        'max("offset") FROM {} GROUP BY topic, "partition"'
    ).format(sql.Identifier(table))
    with psycopg.connect(psycopg_url(database_url or load_settings().database_url)) as conn:
        return {
            (topic, int(p)): (int(n), int(d), int(lo), int(hi))
            for topic, p, n, d, lo, hi in conn.execute(query).fetchall()
        }


def table(kind: str, where: str) -> Found:
    """A table sink's output: `kind` delta (a location), iceberg (a table) or postgres."""
    return {"delta": delta, "iceberg": iceberg, "postgres": postgres}[kind](where)
