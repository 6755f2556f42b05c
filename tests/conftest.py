"""Shared fixtures. Integration tests use the real broker, Postgres and Spark, brought up once.

Each test gets its own drain (fresh topics, groups and sink table), so tests never see each
other's records and the suite can run against a long-lived local stack.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from drainer.config import DrainConfig, load_drains


@pytest.fixture(scope="session")
def stack() -> None:
    """Kafka, Postgres and the Spark connector jars, started if needed (idempotent)."""
    from drainer import services

    services.up(echo=lambda *_: None)


@pytest.fixture(scope="session")
def spark(stack):
    from spark_jobs.session import get_spark

    return get_spark()


@pytest.fixture
def make_drain(stack, tmp_path: Path, monkeypatch) -> Iterator[Callable[..., DrainConfig]]:
    """Create a uniquely named drain with its topics; also writes it to DRAINER_CONFIG."""
    from drainer.kafka_io import admin, create_topics

    made: list[DrainConfig] = []

    def factory(**overrides: Any) -> DrainConfig:
        suffix = uuid.uuid4().hex[:8]
        name = overrides.pop("name", f"t_{suffix}")
        body: dict[str, Any] = {
            "topic": f"t_{suffix}",
            "group": f"g_{suffix}",
            "levels": 3,
            "partitions": 2,
            "budget": 7000,
            "schedule": None,
            "sink": {"type": "postgres", "table": f"sink_{suffix}"},
        }
        body.update(overrides)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"drains": {name: body}}))
        monkeypatch.setenv("DRAINER_CONFIG", str(path))
        drain = load_drains(path)[name]
        create_topics(drain, [drain.dlq_topic] if drain.dlq_topic else [])
        made.append(drain)
        return drain

    yield factory
    # keep a long-lived local broker from collecting thousands of test topics
    for drain in made:
        topics = [drain.level_topic(level) for level in range(drain.levels)]
        topics += [drain.dlq_topic] if drain.dlq_topic else []
        client = admin(drain)  # must outlive its futures
        for future in client.delete_topics(topics, operation_timeout=10).values():
            # already gone, or the test stopped the broker: nothing to keep
            with contextlib.suppress(Exception):
                future.result(timeout=15)


@pytest.fixture
def materialize_levels(spark) -> Callable[[DrainConfig, list[int]], dict[str, Any]]:
    """One Dagster run of a drain's asset over a range of levels; returns its metadata values.

    Each level partition's materialization carries its own level's numbers under the same keys;
    they come back flattened as `level_<n>_<key>`, next to the run-wide `run_*` totals (and
    `drained`, the run's total).
    """
    import dagster as dg

    from dagster_project.definitions import RANGE_END, RANGE_START, build_definitions

    def materialize(drain: DrainConfig, levels: list[int]) -> dict[str, Any]:
        defs = build_definitions()
        result = dg.materialize(
            [defs.get_assets_def(drain.name)],
            resources={"drainer": defs.resources["drainer"]},
            instance=dg.DagsterInstance.ephemeral(),
            tags={RANGE_START: str(min(levels)), RANGE_END: str(max(levels))},
        )
        assert result.success
        materializations = result.asset_materializations_for_node(drain.name)
        assert sorted(m.partition for m in materializations) == [str(lv) for lv in levels]
        # the same keys on every partition, so the UI's plots by partition compare levels
        assert len({frozenset(m.metadata) for m in materializations}) == 1
        flat: dict[str, Any] = {}
        for m in materializations:
            for key, value in m.metadata.items():
                if key.startswith("run_") or key in ("drain_run_id", "finished_run_id"):
                    flat[key] = value.value
                else:
                    flat[f"level_{m.partition}_{key}"] = value.value
        flat["drained"] = flat["run_drained"]
        return flat

    return materialize


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath) and "integration" not in item.keywords:
            item.add_marker(pytest.mark.integration)


os.environ.setdefault("DRAINER_SPARK_LOG_LEVEL", "ERROR")
