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

from drainer.config import DrainConfig
from drainer.testing import temporary_drain


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
def make_drain(stack, tmp_path: Path) -> Iterator[Callable[..., DrainConfig]]:
    """Create a uniquely named drain with its topics; also writes it to DRAINER_CONFIG."""
    with contextlib.ExitStack() as drains:

        def factory(**overrides: Any) -> DrainConfig:
            suffix = uuid.uuid4().hex[:8]
            defaults = {"topic": f"t_{suffix}", "group": f"g_{suffix}"}
            defaults["sink"] = {"type": "postgres", "table": f"sink_{suffix}"}
            name = overrides.pop("name", f"t_{suffix}")
            return drains.enter_context(
                temporary_drain(tmp_path, name=name, **{**defaults, **overrides})
            )

        yield factory


@pytest.fixture
def materialize_levels(spark) -> Callable[[DrainConfig, list[int]], dict[str, Any]]:
    """One Dagster run of a drain's asset over a range of levels; returns its metadata values."""
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
        # one materialization per level partition of the range, all with the run's metadata
        materializations = result.asset_materializations_for_node(drain.name)
        assert sorted(m.partition for m in materializations) == [str(lv) for lv in levels]
        return {key: value.value for key, value in materializations[0].metadata.items()}

    return materialize


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath) and "integration" not in item.keywords:
            item.add_marker(pytest.mark.integration)


os.environ.setdefault("DRAINER_SPARK_LOG_LEVEL", "ERROR")
