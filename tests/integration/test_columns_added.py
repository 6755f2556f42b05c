"""The columns a run adds to its sink table are on the run's record even when the attempt that
added them died: noted before the table changes (Delta, Iceberg) or with the change (Postgres).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from lifecycle_helpers import cli
from test_exactly_once import drain_until_empty
from test_record_formats import assert_each_offset_once, produce_orders, rows_of

from drainer import faults
from tests.support.drains import ORDER_AVRO, ORDER_AVRO_NOTE, avro_bytes, typed_drain, typed_sink


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_column_added_by_an_attempt_that_crashed_after_its_table_commit_is_audited(
    lakehouse, make_drain, tmp_path, kind
):
    avsc = tmp_path / "order.avsc"
    avsc.write_text(json.dumps(ORDER_AVRO))
    drain = make_drain(**typed_drain({"format": "avro", "schema": str(avsc)}, typed_sink(kind)))
    older = produce_orders(drain, lambda o: avro_bytes(ORDER_AVRO, o))
    drain_until_empty(drain)
    # the producers move to a schema with a new optional field, and the drain's file with them
    avsc.write_text(json.dumps(ORDER_AVRO_NOTE))
    newer = produce_orders(drain, lambda o: avro_bytes(ORDER_AVRO_NOTE, {**o, "note": "n"}))
    crashed = cli("run", drain.name, fault="after_table_commit")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    [resumed] = drain_until_empty(drain)  # finds the table commit, commits Postgres only
    assert resumed.columns_added == ["note"]
    rows = rows_of(drain)
    assert len(rows) == older + newer
    assert_each_offset_once(drain, rows)


def test_an_abandoned_delta_plan_keeps_no_claim_to_columns_its_commit_never_added(
    lakehouse, make_drain
):
    """Delta adds new columns with its commit: a plan whose write noted one and failed before
    committing, then abandoned, added nothing, and its run must not say otherwise."""
    from deltalake import DeltaTable
    from test_exactly_once import runs_of

    from drainer.kafka.producer import OutRecord
    from drainer.settings import load_settings
    from drainer.store import runs
    from tests.support.stack import get_engine, produce_records

    path = f"abandoned_{uuid.uuid4().hex[:8]}"
    first = make_drain(
        processor="spark_jobs.examples:one_row_per_record", sink={"type": "delta", "path": path}
    )
    produce_records(first, [OutRecord(value=b"%d" % i) for i in range(10)], level=0)
    drain_until_empty(first)  # the table, without `value_text`
    # another drain into the same table, whose processor adds `value_text` and then fails
    drain = make_drain(
        processor="tests.processors:new_column_then_fails", sink={"type": "delta", "path": path}
    )
    produce_records(drain, [OutRecord(value=b"%d" % i) for i in range(10)], level=0)
    failed = cli("run", drain.name)
    assert failed.returncode != 0 and "no amount in" in failed.stderr, failed.stderr[-3000:]
    open_run = runs_of(drain)[-1]
    assert open_run.status == "failed"  # its plan still open: the next run would resume it
    with get_engine().connect() as conn:
        assert runs.columns_added(conn, open_run.id) == ["value_text"]  # noted before the write

    done = cli("plan", "abandon", drain.name, "--reason", "test: a plan given up")
    assert done.returncode == 0, done.stderr[-3000:]
    with get_engine().connect() as conn:
        assert runs.columns_added(conn, open_run.id) == []
    table = DeltaTable(str(Path(load_settings().warehouse) / path))
    assert "value_text" not in [f.name for f in table.schema().fields]
