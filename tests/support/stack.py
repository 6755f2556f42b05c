"""The product's calls as tests make them most: with the settings of the test process's
environment (tests are an edge, like the CLI). Each reads the environment at its call, as the
test has it then (a test may point DRAINER_DATABASE_URL elsewhere for a while)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.kafka import producer
from drainer.kafka.producer import OutRecord
from drainer.kafka.session import KafkaSession
from drainer.settings import load_settings
from drainer.store import engine


def get_engine(url: str | None = None) -> Engine:
    """`drainer.store.get_engine` of `url`, by default the environment's database."""
    return engine.get_engine(url or load_settings().database_url)


def produce_records(
    drain: DrainConfig,
    records: Iterable[OutRecord],
    level: int = 0,
    on_progress: Callable[[int], None] | None = None,
    partition: int | None = None,
    topic: str | None = None,
    kafka: KafkaSession | None = None,
    **more: Any,
) -> int:
    """`drainer.kafka.producer.produce_records` through `kafka`, by default a session of its
    own on the environment's brokers."""
    if kafka is not None:
        return producer.produce_records(
            drain, records, level, on_progress, partition, topic, kafka=kafka, **more
        )
    with KafkaSession(drain, load_settings()) as own:
        return producer.produce_records(
            drain, records, level, on_progress, partition, topic, kafka=own, **more
        )
