"""Records as data on the real stack: declared formats decoded in Spark into typed rows.

Each sink is read back without Spark (psycopg through SQLAlchemy, deltalake, pyiceberg); every
row names its source (`_topic`, `_partition`, `_offset`), so "exactly once" is checked record by
record. The Confluent wire format uses confluent-kafka's in-process registry (`mock://`): the
test registers the writer schemas in the same client object the run's driver asks.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from offsets import high_watermarks, stored_offsets
from sqlalchemy import text
from test_exactly_once import drain_until_empty

from drainer.config import DrainConfig
from drainer.config.formats import RegistryConfig
from drainer.errors import BadRecord, ConfigError
from drainer.kafka.producer import OutRecord
from drainer.lifecycle.dlq import retry_dead_letters
from drainer.observe.status import drain_status
from drainer.records.registry import frame, register
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.drains import (
    ORDER_AVRO,
    ORDER_AVRO_NOTE,
    avro_bytes,
    order,
    typed_drain,
    typed_sink,
)
from tests.support.stack import get_engine, produce_records

ORDER_DDL = "id string, amount double, qty int"
ORDER_V1 = ORDER_AVRO
ORDER_V2 = ORDER_AVRO_NOTE  # a new optional field (null by default)
# v3: `amount` changes type, an incompatible change
ORDER_V3 = {
    **ORDER_V1,
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "string"},
        {"name": "qty", "type": "int"},
    ],
}
PER_LEVEL = 20  # records per (level, partition)


def produce_orders(drain: DrainConfig, encode) -> int:
    """PER_LEVEL orders to every (level, partition), each value made by `encode(dict)`."""
    total = 0
    for level in range(drain.levels):
        for partition in range(drain.partitions):
            records = [
                OutRecord(
                    value=encode(order(level, partition, i)),
                    key=f"k{i % 3}".encode(),
                    headers=[("source", b"test")],
                )
                for i in range(PER_LEVEL)
            ]
            total += produce_records(drain, records, level=level, partition=partition)
    return total


def rows_of(drain: DrainConfig) -> list[dict[str, Any]]:
    """The sink's rows as dicts, read without Spark."""
    settings = load_settings()
    if drain.sink.type == "postgres":
        with get_engine().connect() as conn:
            found = conn.execute(text(f'SELECT * FROM "{drain.sink.table}"')).mappings()
            return [dict(row) for row in found]
    if drain.sink.type == "delta":
        from deltalake import DeltaTable

        path = Path(settings.warehouse) / (drain.sink.path or "")
        return list(DeltaTable(str(path)).to_pyarrow_table().to_pylist())
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("drainer", uri=settings.database_url)
    return list(catalog.load_table(drain.sink.table).scan().to_arrow().to_pylist())


def assert_each_offset_once(
    drain: DrainConfig, rows: list[dict[str, Any]], dead: Sequence[dict[str, Any]] = ()
) -> None:
    """The sink's rows plus the dead letters (`dead_letters_of`) are exactly the drain's
    records, by source coordinates: none twice, none in both, none missing, none extra."""
    seen = Counter((r["_topic"], r["_partition"], r["_offset"]) for r in rows)
    assert max(seen.values(), default=1) == 1, "a record was written twice"
    lettered = Counter((d["topic"], d["partition"], d["offset"]) for d in dead)
    assert max(lettered.values(), default=1) == 1, "a record was dead-lettered twice"
    assert not set(seen) & set(lettered), "a record is both a row and a dead letter"
    high = high_watermarks(drain)
    expected = {(t, p, o) for (t, p), end in high.items() for o in range(end)}
    assert set(seen) | set(lettered) == expected


def assert_offsets_unmoved(drain: DrainConfig) -> None:
    """Every partition's committed offset is still 0 with an empty offset map (the plan that
    failed stored where it starts, nothing more)."""
    assert set(stored_offsets(drain).values()) <= {(0, "")}


def assert_no_table_commit(drain: DrainConfig) -> None:
    """The Delta table has no commit (a failed job may leave data files, never a version)."""
    log = Path(load_settings().warehouse) / (drain.sink.path or "") / "_delta_log"
    assert not list(log.glob("*.json")) if log.exists() else True


def assert_run_fails_naming(drain: DrainConfig, offset: int, phrase: str) -> None:
    """The run fails on the bad record at level 1, partition 0, `offset` in one line that
    says `phrase`, and commits nothing."""
    with pytest.raises(BadRecord, match=rf"{drain.level_topic(1)}\[0\]@{offset}") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value) and phrase in str(err.value)
    assert_offsets_unmoved(drain)
    assert_no_table_commit(drain)


def dead_letters_of(drain: DrainConfig) -> list[dict[str, Any]]:
    with get_engine().connect() as conn:
        found = conn.execute(
            text(
                'SELECT topic, partition, "offset", level, key, value, headers, error '
                'FROM dead_letters WHERE drain = :d ORDER BY topic, partition, "offset"'
            ),
            {"d": drain.name},
        ).mappings()
        return [dict(row) for row in found]


sink_for = typed_sink


def assert_typed(rows: list[dict[str, Any]]) -> None:
    row = next(r for r in rows if r["id"].endswith("-7"))
    assert (row["amount"], row["qty"]) == (7 * 1.5, 7)
    assert isinstance(row["amount"], float) and isinstance(row["qty"], int)
    assert row["_key"] == "k1" and row["_level"] == int(row["id"].split("-")[0])
    assert json.loads(row["_headers"])[0]["key"] == "source"


# ---------------------------------------------------------------- formats x sinks


@pytest.mark.parametrize("kind", ["postgres", "delta", "iceberg"])
def test_json_values_become_typed_rows_in_each_sink_each_offset_once(lakehouse, make_drain, kind):
    drain = make_drain(
        **typed_drain(
            {"format": "json", "schema": ORDER_DDL}, sink_for(kind), key={"format": "string"}
        )
    )
    produced = produce_orders(drain, lambda o: json.dumps(o).encode())
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    assert_typed(rows)


@pytest.mark.parametrize("kind", ["postgres", "delta", "iceberg"])
def test_avro_values_from_an_avsc_become_typed_rows_in_each_sink(
    lakehouse, make_drain, tmp_path, kind
):
    avsc = tmp_path / f"order_{uuid.uuid4().hex[:6]}.avsc"
    avsc.write_text(json.dumps(ORDER_V1))
    drain = make_drain(
        **typed_drain(
            {"format": "avro", "schema": str(avsc)}, sink_for(kind), key={"format": "string"}
        )
    )
    produced = produce_orders(drain, lambda o: avro_bytes(ORDER_V1, o))
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    assert_typed(rows)


def registry_drain(make_drain, kind: str, **overrides: Any) -> tuple[DrainConfig, RegistryConfig]:
    registry = {"url": f"mock://drainer-{uuid.uuid4().hex[:8]}"}
    drain = make_drain(
        **typed_drain(
            {"format": "avro", "registry": registry},
            sink_for(kind),
            key={"format": "string"},
            **overrides,
        )
    )
    assert drain.value is not None and drain.value.registry is not None
    return drain, drain.value.registry


@pytest.mark.parametrize("kind", ["postgres", "delta", "iceberg"])
def test_wire_format_values_decode_with_the_registry_writer_schema_in_each_sink(
    lakehouse, make_drain, kind
):
    drain, registry = registry_drain(make_drain, kind)
    v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
    produced = produce_orders(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)))
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    assert_typed(rows)


# ---------------------------------------------------------------- schema evolution


@pytest.mark.parametrize("kind", ["postgres", "delta"])
def test_a_new_optional_field_mid_backlog_adds_a_column_with_nulls_for_older_rows(
    lakehouse, make_drain, kind
):
    drain, registry = registry_drain(make_drain, kind)
    v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
    v2 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V2))
    older = produce_orders(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)))
    drain_until_empty(drain)  # the table exists without `note`
    assert "note" not in rows_of(drain)[0]
    newer = produce_orders(
        drain, lambda o: frame(v2, avro_bytes(ORDER_V2, {**o, "note": f"n{o['qty']}"}))
    )
    # and a range holding both writer schemas: v1 records after v2 ones in one run
    mixed = produce_orders(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)))
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == older + newer + mixed
    assert_each_offset_once(drain, rows)
    notes = Counter(r["note"] is None for r in rows)
    assert notes == {True: older + mixed, False: newer}


def test_an_incompatible_change_stops_the_run_naming_the_field_and_commits_nothing(
    lakehouse, make_drain
):
    drain, registry = registry_drain(make_drain, "delta")
    v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
    v3 = register(registry, f"{drain.topic}-other", json.dumps(ORDER_V3))
    produce_orders(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)))
    produce_orders(drain, lambda o: frame(v3, avro_bytes(ORDER_V3, {**o, "amount": "x"})))
    with pytest.raises(ConfigError, match="field amount is double") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value)
    assert_offsets_unmoved(drain)
    assert_no_table_commit(drain)


def test_a_removed_required_field_stops_the_run_naming_the_field(lakehouse, make_drain):
    drain, registry = registry_drain(make_drain, "postgres")
    v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
    without_qty = {**ORDER_V1, "fields": ORDER_V1["fields"][:2]}
    v4 = register(registry, f"{drain.topic}-other", json.dumps(without_qty))
    produce_orders(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)))
    produce_orders(drain, lambda o: frame(v4, avro_bytes(without_qty, o)))
    with pytest.raises(ConfigError, match="field qty is required in writer schema") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value)
    assert_offsets_unmoved(drain)
    with get_engine().connect() as conn:
        assert conn.scalar(text("SELECT to_regclass(:t)"), {"t": drain.sink.table}) is None


# ---------------------------------------------------------------- bad records


def bad_values(v1: int | None) -> dict[str, bytes]:
    values = {
        "malformed": b'{"id": "x", "amount": ',
        "truncated": b"\x00\x00",
        "wrong_magic": b"\x07" + b"\x00\x00\x00\x01" + b"zz",
        "unknown_id": frame(987_654, b"\x02x"),
    }
    if v1 is not None:  # a known id whose payload is cut short
        values["short_payload"] = frame(v1, avro_bytes(ORDER_V1, order(0, 0, 1))[:3])
    return values


def produce_with_bad(drain: DrainConfig, good, bad: dict[str, bytes]) -> tuple[int, dict]:
    """Good records with the bad ones in the middle of level 1's partition 0; returns the
    total and each bad kind's offset."""
    total = produce_orders(drain, good)
    offsets = {}
    for kind, value in bad.items():
        offsets[kind] = high_watermarks(drain)[(drain.level_topic(1), 0)]
        total += produce_records(drain, [OutRecord(value=value, key=kind.encode())], 1, None, 0)
    total += produce_orders(drain, good)
    return total, offsets


@pytest.mark.parametrize("fmt", ["json", "wire"])
def test_a_bad_record_fails_the_run_naming_it_with_nothing_committed(lakehouse, make_drain, fmt):
    """A JSON record's reason is not built in the run's job (`decode.QUICK_ERROR`): the line
    reads the record again for it, so it names the field that does not fit."""
    reason = "bad_records: dead_letter"
    if fmt == "json":
        drain = make_drain(value={"format": "json", "schema": ORDER_DDL}, sink=sink_for("delta"))
        good, bad = (lambda o: json.dumps(o).encode()), {"misfit": b'{"id": "x", "amount": "abc"}'}
        reason = "does not fit its schema: amount = abc is not double"
    else:
        drain, registry = registry_drain(make_drain, "delta")
        v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
        good = lambda o: frame(v1, avro_bytes(ORDER_V1, o))  # noqa: E731
        bad = {k: v for k, v in bad_values(v1).items() if k != "malformed"}
    _, offsets = produce_with_bad(drain, good, {k: bad[k] for k in list(bad)[:1]})
    ((kind, offset),) = offsets.items()
    assert_run_fails_naming(drain, offset, reason)


@pytest.mark.parametrize("kind", ["postgres", "delta"])
def test_bad_records_of_every_kind_go_to_the_dead_letters_with_their_raw_bytes(
    lakehouse, make_drain, kind
):
    drain, registry = registry_drain(make_drain, kind, bad_records="dead_letter")
    v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
    bad = bad_values(v1)
    total, offsets = produce_with_bad(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)), bad)
    drain_until_empty(drain)
    rows, dead = rows_of(drain), dead_letters_of(drain)
    # nothing lost: sink rows + dead letters = records drained, by distinct offsets
    assert len(rows) + len(dead) == total
    assert_each_offset_once(drain, rows, dead)
    by_offset = {d["offset"]: d for d in dead}
    assert set(by_offset) == set(offsets.values())
    for name, offset in offsets.items():
        letter = by_offset[offset]
        assert bytes(letter["value"]) == bad[name] and bytes(letter["key"]) == name.encode()
        assert letter["error"].startswith("undecodable: ") and letter["level"] == 1
    reasons = {name: by_offset[offset]["error"] for name, offset in offsets.items()}
    assert "truncated" in reasons["truncated"]
    assert "wrong magic byte 0x07" in reasons["wrong_magic"]
    assert "unknown schema id 987654" in reasons["unknown_id"]
    assert "does not decode with writer schema" in reasons["short_payload"]
    # counted per level: `drainer status` and the runs' level outcomes (Dagster's metadata)
    status = drain_status(drain, load_settings())
    assert {lv["level"]: lv["dead_letters"] for lv in status["levels"]} == {0: 0, 1: 5, 2: 0}
    with get_engine().connect() as conn:
        per_level = conn.execute(
            text(
                "SELECT rl.level, sum(rl.dead_lettered) FROM run_levels rl JOIN runs r "
                "ON r.id = rl.run_id WHERE r.drain = :d GROUP BY rl.level"
            ),
            {"d": drain.name},
        ).all()
    assert dict(per_level)[1] == 5


def test_a_dead_letter_of_an_unknown_schema_id_decodes_once_retried_after_the_schema_exists(
    lakehouse, make_drain
):
    """`drainer dlq retry` once the schema is fixed: here the writer's schema was registered
    only after its first record was drained (mock registries number schemas from 1)."""
    drain, registry = registry_drain(make_drain, "postgres", bad_records="dead_letter")
    v1 = register(registry, f"{drain.topic}-value", json.dumps(ORDER_V1))
    early = frame(v1 + 1, avro_bytes(ORDER_V2, {**order(1, 0, 9), "note": "early"}))
    produce_records(drain, [OutRecord(value=early, key=b"early")], 1, None, 0)
    produce_orders(drain, lambda o: frame(v1, avro_bytes(ORDER_V1, o)))
    drain_until_empty(drain)
    [letter] = dead_letters_of(drain)
    assert f"unknown schema id {v1 + 1}" in letter["error"]
    assert register(registry, f"{drain.topic}-value", json.dumps(ORDER_V2)) == v1 + 1
    assert (
        retry_dead_letters(drain, load_settings(), as_is=True) == 1
    )  # its schema is registered now
    retried = drain_job.run(
        drain, trigger="test", settings=load_settings()
    ).finished  # from Postgres: no backlog
    assert retried is not None and (retried.retried, retried.dead_again) == (1, 0)
    [row] = [r for r in rows_of(drain) if r["note"] is not None]
    assert (row["id"], row["note"], row["_key"]) == ("1-0-9", "early", "early")
    # retried as it was read, at its own offset: the rows alone are every record once
    assert_each_offset_once(drain, rows_of(drain))


def test_malformed_json_goes_to_the_dead_letters_and_the_rest_is_written(lakehouse, make_drain):
    drain = make_drain(
        value={"format": "json", "schema": ORDER_DDL},
        bad_records="dead_letter",
        sink=sink_for("postgres"),
    )
    bad = {
        "malformed": bad_values(None)["malformed"],
        "not_json": b"\xff\xfe",
        # well-formed JSON whose field does not fit its type: not "malformed JSON"
        "misfit": b'{"id": "x", "amount": "abc", "qty": 2}',
    }
    total, offsets = produce_with_bad(drain, lambda o: json.dumps(o).encode(), bad)
    drain_until_empty(drain)
    rows, dead = rows_of(drain), dead_letters_of(drain)
    assert len(rows) + len(dead) == total
    assert_each_offset_once(drain, rows, dead)
    assert {d["offset"] for d in dead} == set(offsets.values())
    errors = {bytes(d["key"]).decode(): d["error"] for d in dead}
    assert "malformed JSON" in errors["malformed"] and "malformed JSON" in errors["not_json"]
    assert "malformed" not in errors["misfit"], errors
    assert "does not fit its schema: amount = abc is not double" in errors["misfit"], errors


def test_a_drain_with_neither_value_nor_processor_writes_raw_records_with_metadata(
    lakehouse, make_drain
):
    drain = make_drain(**typed_drain(None, sink_for("postgres")))
    produced = produce_orders(drain, lambda o: json.dumps(o).encode())
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    assert json.loads(bytes(rows[0]["value"]))["id"] and isinstance(rows[0]["_key"], bytes)


def test_json_schema_dates_are_typed_and_a_record_lacking_a_required_field_is_bad(
    make_drain, tmp_path
):
    """Before: `"format": "date-time"` became a text column, and a record without a `required`
    field was written with a null."""
    schema = tmp_path / "event.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "required": ["id"],
                "properties": {
                    "id": {"type": "integer"},
                    "at": {"type": "string", "format": "date-time"},
                    "day": {"type": "string", "format": "date"},
                },
            }
        )
    )
    drain = make_drain(
        partitions=1,
        value={"format": "json", "schema": str(schema)},
        bad_records="dead_letter",
        sink=sink_for("postgres"),
    )
    good = {"id": 1, "at": "2026-11-28T12:30:00Z", "day": "2026-11-28"}
    lacking = {"at": "2026-11-28T12:31:00Z"}
    records = [OutRecord(value=json.dumps(v).encode(), key=b"k") for v in (good, lacking)]
    produce_records(drain, records, 1, None, 0)
    drain_until_empty(drain)
    with get_engine().connect() as conn:
        types = dict(
            conn.execute(
                text(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = :t AND column_name IN ('at', 'day')"
                ),
                {"t": drain.sink.table},
            ).all()
        )
    assert types == {"at": "timestamp with time zone", "day": "date"}, types
    [row] = rows_of(drain)
    assert row["id"] == 1 and str(row["day"]) == "2026-11-28"
    assert row["at"] == datetime(2026, 11, 28, 12, 30, tzinfo=UTC), row["at"]
    [dead] = dead_letters_of(drain)
    assert dead["error"] == "undecodable: the value lacks required id", dead


def test_a_drain_writing_no_metadata_column_still_names_its_bad_records(make_drain):
    """`metadata_columns: []`: a Postgres table of the value's columns alone; the run still
    reads each record's coordinates, so a bad record's dead letter names it."""
    drain = make_drain(
        value={"format": "json", "schema": ORDER_DDL},
        metadata_columns=[],
        bad_records="dead_letter",
    )
    total, offsets = produce_with_bad(drain, lambda o: json.dumps(o).encode(), {"bad": b"{"})
    drain_until_empty(drain)
    rows, dead = rows_of(drain), dead_letters_of(drain)
    # less the run id a Postgres table keeps for its own bookkeeping (`drainer.sinks`)
    assert set(rows[0]) - {"_drainer_run_id"} == {"id", "amount", "qty"}, rows[0]
    assert len(rows) + len(dead) == total
    assert [(d["topic"], d["partition"], d["offset"]) for d in dead] == [
        (drain.level_topic(1), 0, offsets["bad"])
    ], dead


def test_a_drain_keeping_only_the_coordinates_writes_no_other_metadata(lakehouse, make_drain):
    """`metadata_columns` leaves `_timestamp`, `_level`, `_key` and `_headers` out of the rows;
    a dead letter still keeps its record's timestamp (read from the record, not the row)."""
    drain = make_drain(
        value={"format": "json", "schema": ORDER_DDL},
        metadata_columns=["_topic", "_partition", "_offset"],
        bad_records="dead_letter",
        sink=sink_for("delta"),
    )
    total, offsets = produce_with_bad(drain, lambda o: json.dumps(o).encode(), {"bad": b"{"})
    drain_until_empty(drain)
    rows, dead = rows_of(drain), dead_letters_of(drain)
    assert set(rows[0]) == {"id", "amount", "qty", "_topic", "_partition", "_offset"}, rows[0]
    assert len(rows) + len(dead) == total
    assert_each_offset_once(drain, rows, dead)
    with get_engine().connect() as conn:
        [stamp] = conn.execute(
            text("SELECT ts FROM dead_letters WHERE drain = :d"), {"d": drain.name}
        ).scalars()
    assert [d["offset"] for d in dead] == [offsets["bad"]] and stamp is not None
