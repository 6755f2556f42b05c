"""Where a drain's progress stands, read three ways: Kafka's end offsets, Postgres, the mirror."""

from __future__ import annotations

from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.kafka.clients import group_offsets, partitions_of, watermarks
from drainer.store import get_engine


def high_watermarks(drain: DrainConfig) -> dict[tuple[str, int], int]:
    marks = watermarks(drain, partitions_of(drain, range(drain.levels)))
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
    for level, parts in partitions_of(drain, range(drain.levels)).items():
        keys = [(drain.level_topic(level), p) for p in parts]
        found.update(group_offsets(drain, drain.level_group(level), keys))
    return found


def consumer_group_lag(drain: DrainConfig, level: int) -> dict[tuple[str, int], int]:
    """Lag per partition of a level's group, as Kafka's own `kafka-consumer-groups` reports it."""
    import subprocess

    from drainer.services.jars import kafka_tool_jars
    from drainer.services.tools import require
    from drainer.settings import load_settings

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
