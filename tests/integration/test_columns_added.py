"""The columns a run adds to its sink table are on the run's record even when the attempt that
added them died: noted before the table changes (Delta, Iceberg) or with the change (Postgres).
"""

from __future__ import annotations

import json

import pytest
from lifecycle_helpers import cli
from test_exactly_once import drain_until_empty
from test_record_formats import assert_each_offset_once, produce_orders, rows_of

from drainer import faults
from drainer.testing import ORDER_AVRO, ORDER_AVRO_NOTE, avro_bytes, typed_drain, typed_sink


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
