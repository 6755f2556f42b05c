"""Temporary drains for tests, benchmarks and experiments on a live stack.

`temporary_drain` writes a one-drain YAML file, points DRAINER_CONFIG at it (so the CLI and
Dagster see the drain too), creates its topics, and afterwards deletes the topics again, so a
long-lived local broker does not collect thousands of them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from drainer.config import DrainConfig, load_drains
from drainer.settings import use_config_path


def drain_body(name: str, **overrides: Any) -> dict[str, Any]:
    """A small valid drain named `name`: 3 levels x 2 partitions, budget 7000, no schedule."""
    body: dict[str, Any] = {
        "topic": name,
        "group": name,
        "levels": 3,
        "partitions": 2,
        "budget": 7000,
        "schedule": None,
        "sink": {"type": "postgres", "table": f"{name}_out"},
    }
    if overrides.get("mode", "dataframe") == "dataframe" and "value" not in overrides:
        # the tests' drains aggregate, as drains did before one without a processor wrote
        # one row per record
        body["processor"] = "spark_jobs.examples:time_buckets"
    body.update(overrides)
    return body


def create_drain(config_dir: Path, prefix: str = "t", **overrides: Any) -> tuple[DrainConfig, Path]:
    """Write a uniquely named one-drain YAML file under `config_dir` and create the topics."""
    from drainer.kafka.session import KafkaSession

    name = overrides.pop("name", None) or f"{prefix}_{uuid.uuid4().hex[:8]}"
    path = Path(config_dir) / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"drains": {name: drain_body(name, **overrides)}}))
    drain = load_drains(path)[name]
    with KafkaSession(drain) as kafka:
        kafka.create_topics([drain.dlq_topic] if drain.dlq_topic else [])
    return drain, path


@contextlib.contextmanager
def temporary_drain(config_dir: Path, prefix: str = "t", **overrides: Any) -> Iterator[DrainConfig]:
    """A uniquely named drain with its topics, current in DRAINER_CONFIG while the block runs."""
    drain, path = create_drain(config_dir, prefix, **overrides)
    with use_config_path(path):
        try:
            yield drain
        finally:
            delete_topics(drain)


def delete_topics(drain: DrainConfig) -> None:
    """Delete a drain's level (and DLQ) topics; already gone or broker down is not an error."""
    from drainer.kafka.session import KafkaSession

    topics = [drain.level_topic(level) for level in range(drain.levels)]
    topics += [drain.dlq_topic] if drain.dlq_topic else []
    with KafkaSession(drain) as kafka:
        for future in kafka.admin.delete_topics(topics, operation_timeout=10).values():
            with contextlib.suppress(Exception):
                future.result(timeout=15)
