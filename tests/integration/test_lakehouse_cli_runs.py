"""`drainer run` of a Delta or Iceberg drain, as a user runs it (issue 31, item 6): an empty
first run starts no Spark job, and a run says how many rows it added to the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from drainer.kafka.producer import OutRecord
from tests.support.stack import produce_records

pytestmark = pytest.mark.slow

DRAINER = [sys.executable, "-m", "spark_jobs.cli"]
ONE_ROW_PER_RECORD = "spark_jobs.examples:one_row_per_record"


def drainer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DRAINER, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


def sink_of(fmt: str) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    if fmt == "delta":
        return {"type": "delta", "path": f"cli_{suffix}"}
    return {"type": "iceberg", "table": f"drains.cli_{suffix}"}


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_an_empty_lakehouse_run_starts_no_spark_and_a_full_one_prints_the_rows_it_added(
    make_drain, lakehouse, fmt
):
    """Before the sink interface (aa598de) a table sink's `published_rows` was always 0 (the
    commit hard-coded it); before this test, an empty run's phases gave `spark_job` the time
    clearing the stage took (0.019 s for an Iceberg drain with nothing to read)."""
    drain = make_drain(levels=2, partitions=1, processor=ONE_ROW_PER_RECORD, sink=sink_of(fmt))

    empty = drainer("run", drain.name, "--json")
    assert empty.returncode == 0, empty.stderr[-3000:]
    # spark_jobs.cli prints `spark: …` when the executor is first called: it never was
    assert not [line for line in empty.stderr.splitlines() if line.startswith("spark:")]
    result = json.loads(empty.stdout)
    assert result["drained"] == 0 and result["published_rows"] == 0
    assert result["phases"]["spark_start"] == 0 and result["phases"]["spark_job"] == 0
    assert result["table_commit"] == {}

    produce_records(drain, [OutRecord(value=b"v", key=b"k")] * 4, 0)
    produce_records(drain, [OutRecord(value=b"v", key=b"k")] * 3, 1)
    full = drainer("run", drain.name)
    assert full.returncode == 0, full.stderr[-3000:]
    assert [line for line in full.stderr.splitlines() if line.startswith("spark:")]
    assert "7 records in" in full.stdout and "; 7 sink rows published" in full.stdout, full.stdout

    again = drainer("run", drain.name, "--json")  # nothing left: no Spark again
    assert again.returncode == 0, again.stderr[-3000:]
    assert "spark:" not in again.stderr
    assert json.loads(again.stdout)["phases"]["spark_job"] == 0
