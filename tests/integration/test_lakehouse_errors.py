"""Issue 17: bad input for the lakehouse sinks fails clearly, commits nothing, keeps the plan.

An Iceberg REST catalog nobody answers at. (A Postgres-only setting on a lakehouse sink is
refused when the drains file loads: tests/unit/test_lakehouse_config.py.)
"""

from __future__ import annotations

import socket
import uuid

import pytest
from offsets import stored_offsets
from test_exactly_once import produce_backlog, runs_of
from test_lakehouse import BUDGET, DATAFRAME_MODE, PER_PARTITION, sink_of, table_arrow

from drainer.config.sinks import SinkConfig
from drainer.errors import CatalogUnavailable
from spark_jobs import drain_job

pytestmark = pytest.mark.slow


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
        drain_job.run(drain, trigger="test")
    message = str(info.value)
    assert f"Iceberg catalog '{name}'" in message and f"sink.catalog.uri {uri}" in message
    assert "Connection refused" in message and "correct sink.catalog.uri" in message
    assert "\n" not in message  # one line, not the JVM's trace
    (run,) = runs_of(drain)
    assert run.status == "failed"  # its plan stays open
    assert set(stored_offsets(drain).values()) == {(0, "")}  # nothing committed

    # the catalog fixed (here: the embedded one), the same run resumes with the same ranges
    fixed = drain.model_copy(update={"sink": SinkConfig(type="iceberg", table=table)})
    result = drain_job.run(fixed, trigger="test")
    assert result.resumed and result.run_id == run.id and result.drained == BUDGET
    assert table_arrow(fixed).num_rows == BUDGET
