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
from typing import Any, NamedTuple

import pytest

from drainer.config import DrainConfig
from drainer.settings import load_settings
from tests.support.drains import STACK_FORMATS, temporary_drain

REPO = Path(__file__).resolve().parent.parent
# the tests' own processors (tests.processors) are imported by module, by the driver and by
# Spark's Python workers alike: the repository's root goes on the PYTHONPATH of every process
# the tests start, the stack's Spark Connect server among them (it takes the PYTHONPATH of the
# process that starts it, and restarts when that changes)
if str(REPO) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.getenv("PYTHONPATH")]))


@pytest.fixture(scope="session")
def stack() -> None:
    """Kafka, Postgres and the Spark connector jars, started if needed (idempotent).

    The Connect server loads both table formats from the start: the lakehouse tests need them,
    and a server restarted for them mid-session would end the Spark session every other test
    shares.
    """
    from drainer import services
    from drainer.settings import load_settings
    from drainer.sinks import SINKS
    from drainer.spark.jars import spark_kafka_jars
    from drainer.spark.javac import has_jdk

    services.up(load_settings(), echo=lambda *_: None, formats=STACK_FORMATS)
    # `services.up` reports a failed build of a sink's server code and goes on (the Kafka sink
    # then produces from the driver); the suite must not: built here again, a javac error
    # fails every test with javac's words (a no-op once built)
    settings = load_settings()
    if settings.local_spark_connect and settings.spark_master.startswith("local") and has_jdk():
        for cls in SINKS.values():
            if cls.capabilities.server_code:
                cls.server_jar(settings.home, spark_kafka_jars(settings.home))


@pytest.fixture
def spark(stack):
    """The process's session, checked: the chaos test restarts the Connect server."""
    from spark_jobs.session import get_spark

    return get_spark(load_settings(), check=True)


@pytest.fixture(scope="module")
def lakehouse(stack) -> Iterator[Path]:
    """The Connect server with both formats' jars, and a warehouse for the tests' tables.

    Not under pytest's temporary folders: pytest deletes older ones while a concurrent session
    may still use them, and a fixed warehouse keeps the shared Spark session's Iceberg catalog.
    """
    from drainer.services import connect
    from drainer.settings import load_settings

    warehouse = load_settings().home / "test-warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DRAINER_WAREHOUSE", str(warehouse))
        connect.up(load_settings(), echo=lambda *_: None, formats=STACK_FORMATS)
        yield warehouse


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
                if key.startswith("run_") or key in ("drain_run_id", "finished_run_id", "checks_s"):
                    flat[key] = value.value
                else:
                    flat[f"level_{m.partition}_{key}"] = value.value
        flat["drained"] = flat["run_drained"]
        return flat

    return materialize


class DagsterDrains(NamedTuple):
    path: Path
    launches: DrainConfig
    cron: DrainConfig
    browser: DrainConfig
    service: DrainConfig
    leaky: DrainConfig
    upkept: DrainConfig
    fresh: DrainConfig
    produces: DrainConfig
    both: DrainConfig


@pytest.fixture(scope="session")
def dagster_drains(stack, tmp_path_factory) -> Iterator[DagsterDrains]:
    """The drains the session's Dagster deployment serves, each with fresh topics.

    `launches`: UI launches, backfills and the lag sensor; `cron`: its schedule fires every
    minute; `browser`: the browser test's; `service`: max_wait, run_seconds and budget_bytes;
    `leaky`: a processor that fails with a secret in its error; `upkept`: its daily
    maintenance job is launched; `fresh`: max_wait 1m, Dagster's shortest freshness window;
    `produces`: a Kafka sink (its output topic `<name>_out`); `both`: launched by Dagster and
    by Airflow at once (tests/integration/test_airflow.py), its runs slow enough to meet.
    """
    import yaml
    from confluent_kafka.admin import AdminClient, NewTopic

    from drainer.config import load_drains
    from drainer.kafka.session import KafkaSession
    from drainer.settings import load_settings
    from tests.support.drains import delete_topics, drain_body

    suffix = uuid.uuid4().hex[:6]
    bodies = {
        "launches": {"budget": 700, "lag_threshold": 500},
        # a row per record, so the schedule's test checks the sink record by record
        "cron": {
            "budget": 7000,
            "schedule": "* * * * *",
            "processor": "spark_jobs.examples:one_row_per_record",
        },
        "browser": {"budget": 7000},
        # issue 19's keys, launched through Dagster; a row per record
        "service": {
            "budget": 700,
            "max_wait": "1h",
            "run_seconds": 3600,
            "budget_bytes": "200KB",
            "processor": "spark_jobs.examples:one_row_per_record",
        },
        # a processor whose error carries the database password: redaction under Dagster
        "leaky": {"budget": 700, "processor": "tests.processors:leaks_the_database_url"},
        "upkept": {"budget": 700},
        "fresh": {"budget": 700, "max_wait": "1m"},
        # each run holds the lease 10 s mid-run: the other orchestrator's run meets it
        "both": {"budget": 300, "processor": "spark_jobs.examples:slow_one_row_per_record"},
    }
    names = {role: f"{role}_{suffix}" for role in [*bodies, "produces"]}
    bodies["produces"] = {
        "budget": 7000,
        "processor": "spark_jobs.examples:kafka_passthrough",
        "sink": {"type": "kafka", "topic": f"{names['produces']}_out"},
    }
    drains_yaml = {
        names[role]: drain_body(names[role], group=f"g_{names[role]}", **body)
        for role, body in bodies.items()
    }
    path = tmp_path_factory.mktemp("dagster_drains") / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": drains_yaml}))
    loaded = load_drains(path)
    drains = {role: loaded[name] for role, name in names.items()}
    for drain in drains.values():
        with KafkaSession(drain, load_settings()) as kafka:
            kafka.create_topics()
    out = drains["produces"].sink.topic  # type: ignore[union-attr]
    admin = AdminClient({"bootstrap.servers": load_settings().bootstrap_servers})
    admin.create_topics([NewTopic(out, num_partitions=3, replication_factor=1)])[out].result(30)
    yield DagsterDrains(path=path, **drains)
    for drain in drains.values():
        delete_topics(drain)
    admin.delete_topics([out], operation_timeout=10)[out].result(30)


@pytest.fixture(scope="session")
def dagster_stack(dagster_drains, tmp_path_factory):
    """One `dagster-webserver` + `dagster-daemon` for the session, on a temporary DAGSTER_HOME."""
    from tests.integration.dagster_stack import BACKFILL_LOOP_S, REPO, DagsterStack

    env = {
        **os.environ,
        "DRAINER_CONFIG": str(dagster_drains.path),
        # the freshness daemon's loop (30 s by default): a state change seen within seconds
        "FRESHNESS_DAEMON_INTERVAL_SECONDS": "2",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    deployment = DagsterStack(
        home=tmp_path_factory.mktemp("dagster_home"), env=env, backfill_loop_s=BACKFILL_LOOP_S
    )
    _dagster_stacks.append(deployment)
    try:
        yield deployment.start()
    finally:
        deployment.stop()


_dagster_stacks: list[Any] = []  # the session's deployment, while it runs


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the session's Dagster deployment after the last test that uses it, not at the
    session's end: idle, its daemon and webserver took ~9% of a core (11 CPU seconds in 120 s),
    which the rest of the suite's Spark jobs want."""
    if not _dagster_stacks or "dagster_stack" not in item.fixturenames:
        return
    items = item.session.items
    if not any("dagster_stack" in later.fixturenames for later in items[items.index(item) + 1 :]):
        _dagster_stacks.pop().stop()


# What `make test`'s parallel workers keep together, one group to a worker: a module (so its
# module-scoped fixtures, a standalone cluster, start once), except these. pytest-xdist's own
# `xdist_group` marks do nothing under pytest 9.2 (xdist 3.8 renames a test id pytest no longer
# reads), so the scheduler below groups by test id itself.
# the modules of the session's one Dagster deployment (the `dagster_stack` fixture)
# (test_airflow: an Airflow run and a Dagster run of one drain at once)
DAGSTER_MODULES = {
    "test_dagster_real_path",
    "test_dagster_ui_browser",
    "test_local_stack_security",
    "test_airflow",
}
# the modules that start a broker of their own on fixed ports, which overlap (19092 to 19096)
THROWAWAY_BROKERS = {"test_services", "test_consumer_group_lag"}
# groups that take minutes: handed out first, so that none is left running alone at the end
LONGEST_FIRST = (
    "dagster",
    "test_cluster",
    "test_lakehouse",
    "test_kafka_sink",
    "test_sink_folds",
    "test_install",
    "test_service_lost_mid_run",
)


def worker_group(nodeid: str) -> str:
    module = Path(nodeid.split("::", 1)[0]).stem
    if module in DAGSTER_MODULES:
        return "dagster"
    return "throwaway-brokers" if module in THROWAWAY_BROKERS else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    config.option.loadscopereorder = False  # the collection's order: the longest first
    return ByWorkerGroup(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath) and "integration" not in item.keywords:
            item.add_marker(pytest.mark.integration)
        if "dagster_stack" in item.fixturenames and worker_group(item.nodeid) != "dagster":
            raise pytest.UsageError(
                f"{item.nodeid} uses the dagster_stack fixture: add its module to "
                "DAGSTER_MODULES in tests/conftest.py, or each worker starts a deployment"
            )

    def rank(item: pytest.Item) -> int:
        group = worker_group(item.nodeid)
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a module's tests stay together, in their order


os.environ.setdefault("DRAINER_SPARK_LOG_LEVEL", "ERROR")
