"""Where a drain's progress stands, read three ways: Kafka's end offsets, Postgres, the mirror."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.kafka.session import KafkaSession, Watermarks
from drainer.lifecycle.planning import PartitionState, partition_states
from drainer.settings import load_settings
from tests.support.stack import get_engine


def level_watermarks(
    drain: DrainConfig, levels: Iterable[int] | None = None
) -> dict[tuple[int, int], Watermarks]:
    """(level, partition) -> watermarks, read by a session of its own (all levels by default)."""
    with KafkaSession(drain, load_settings()) as kafka:
        return kafka.watermarks(kafka.partitions(range(drain.levels) if levels is None else levels))


def mirrored_offsets(
    drain: DrainConfig, level: int, keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, str]]:
    """(topic, partition) -> (offset, metadata) of a level's consumer group."""
    with KafkaSession(drain, load_settings()) as kafka:
        return kafka.group_offsets({drain.level_group(level): list(keys)})[drain.level_group(level)]


def states(drain: DrainConfig, levels: list[int]) -> list[PartitionState]:
    """Where each partition of the levels stands now (planning's view), by a session of its own."""
    with KafkaSession(drain, load_settings()) as kafka:
        return partition_states(get_engine(), drain, levels, kafka)


def high_watermarks(drain: DrainConfig) -> dict[tuple[str, int], int]:
    marks = level_watermarks(drain)
    return {(drain.level_topic(level), p): wm.high for (level, p), wm in marks.items()}


def stored_offsets(drain: DrainConfig) -> dict[tuple[str, int], tuple[int, str]]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT topic, partition, committed, offset_map FROM partition_offsets WHERE drain = :d"
            ),
            {"d": drain.name},
        )
        return {(r.topic, r.partition): (r.committed, r.offset_map) for r in rows}


def kafka_offsets(drain: DrainConfig) -> dict[tuple[str, int], tuple[int, str]]:
    """The mirror: each level's consumer group `{group}-{level}`, offset and metadata."""
    found = {}
    with KafkaSession(drain, load_settings()) as kafka:
        for level, parts in kafka.partitions(range(drain.levels)).items():
            keys = [(drain.level_topic(level), p) for p in parts]
            found.update(
                kafka.group_offsets({drain.level_group(level): keys})[drain.level_group(level)]
            )
    return found


def consumer_group_lag(drain: DrainConfig, level: int) -> dict[tuple[str, int], int]:
    """Lag per partition of a level's group, as Kafka's own `kafka-consumer-groups` reports it."""
    import subprocess

    from drainer.settings import load_settings
    from drainer.spark.jars import kafka_tool_jars
    from drainer.spark.tools import require

    settings = load_settings()
    classpath = ":".join(str(jar) for jar in kafka_tool_jars(settings.home))
    done = subprocess.run(
        [
            require("java"),
            "-cp",
            classpath,
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            settings.bootstrap_servers,
            "--describe",
            "--group",
            drain.level_group(level),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lag = {}
    for line in done.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[1] == drain.level_topic(level):
            lag[(cols[1], int(cols[2]))] = int(cols[5])
    return lag
