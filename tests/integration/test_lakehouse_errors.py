"""Issue 17: bad input for the lakehouse sinks fails clearly, commits nothing, keeps the plan.

An Iceberg REST catalog nobody answers at, and a table someone else created beforehand with a
column the output cannot be stored in. (A Postgres-only setting on a lakehouse sink is refused
when the drains file loads: tests/unit/test_lakehouse_config.py. A type change between the
drainer's own runs: test_lakehouse.py.)
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from offsets import stored_offsets
from test_exactly_once import produce_backlog, runs_of
from test_lakehouse import BUDGET, DATAFRAME_MODE, PER_PARTITION, sink_of, table_arrow

from drainer.config import DrainConfig
from drainer.config.sink_models import IcebergSinkConfig
from drainer.errors import CatalogUnavailable, ConfigError
from drainer.settings import load_settings
from drainer.sinks import sink_for
from spark_jobs import drain_job

pytestmark = pytest.mark.slow

# someone else's table: `offset` as int, where the drain's output has bigint (Kafka offsets)
THEIRS = pa.table(
    {
        "topic": pa.array(["legacy"], pa.string()),
        "partition": pa.array([0], pa.int32()),
        "offset": pa.array([7], pa.int32()),
        "note": pa.array(["written before the drain existed"], pa.string()),
    }
)


def unused_port() -> int:
    """A local port nothing listens on (the kernel's pick, closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_rest_catalog_fails_the_run_and_keeps_its_plan(make_drain, lakehouse):
    name = f"lake_{uuid.uuid4().hex[:6]}"
    uri = f"http://127.0.0.1:{unused_port()}"
    table = sink_of("iceberg")["table"]
    drain = make_drain(
        sink={"type": "iceberg", "table": table, "catalog": {"name": name, "uri": uri}},
        budget=BUDGET,
        **DATAFRAME_MODE,
    )
    produce_backlog(drain, PER_PARTITION)

    with pytest.raises(CatalogUnavailable) as info:
        drain_job.run(drain, trigger="test", settings=load_settings())
    message = str(info.value)
    assert f"Iceberg catalog '{name}'" in message and f"sink.catalog.uri {uri}" in message
    assert "Connection refused" in message and "correct sink.catalog.uri" in message
    assert "\n" not in message  # one line, not the JVM's trace
    (run,) = runs_of(drain)
    assert run.status == "failed"  # its plan stays open
    assert set(stored_offsets(drain).values()) == {(0, "")}  # nothing committed

    # the catalog fixed (here: the embedded one), the same run resumes with the same ranges
    fixed = drain.model_copy(update={"sink": IcebergSinkConfig(table=table)})
    result = drain_job.run(fixed, trigger="test", settings=load_settings())
    assert result.resumed and result.run_id == run.id and result.drained == BUDGET
    assert table_arrow(fixed).num_rows == BUDGET


def create_theirs(drain: DrainConfig, warehouse: Path) -> None:
    """Create the sink's table with one row, as another writer would (without Spark)."""
    if drain.sink.type == "delta":
        from deltalake import write_deltalake

        write_deltalake(str(warehouse / (drain.sink.path or "")), THEIRS)
        return
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("drainer", uri=load_settings().database_url, warehouse=warehouse.as_uri())
    catalog.create_namespace_if_not_exists((drain.sink.table or "").rsplit(".", 1)[0])
    catalog.create_table(drain.sink.table or "", schema=THEIRS.schema).append(THEIRS)


def table_version(drain: DrainConfig, warehouse: Path) -> int:
    """The Delta table's version or the Iceberg table's current snapshot (read without Spark)."""
    if drain.sink.type == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(warehouse / (drain.sink.path or ""))).version()
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("drainer", uri=load_settings().database_url)
    snapshot = catalog.load_table(drain.sink.table or "").current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_created_by_someone_else_with_a_narrower_column_is_refused(
    make_drain, lakehouse, fmt
):
    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **DATAFRAME_MODE)
    create_theirs(drain, lakehouse)
    version = table_version(drain, lakehouse)
    produce_backlog(drain, PER_PARTITION)

    with pytest.raises(ConfigError) as info:
        drain_job.run(drain, trigger="test", settings=load_settings())
    message = str(info.value)
    assert "output column offset is bigint" in message and "stores it as int" in message
    assert f"the table {sink_for(drain.sink, load_settings()).location()} " in message
    assert "cast it in the processor" in message and "Nothing was committed" in message
    (run,) = runs_of(drain)
    assert run.status == "failed"  # the plan stays for a fixed processor or sink
    assert set(stored_offsets(drain).values()) == {(0, "")}
    # the other writer's table is as they left it
    assert table_version(drain, lakehouse) == version
    assert table_arrow(drain).to_pylist() == THEIRS.to_pylist()
