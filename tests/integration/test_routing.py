"""Issue 49 on the real stack: one topic, many tables, one run exactly once across them.

A drain of 5 event types with different fields routes each type to its own table (a template
over `event_type`, each table only its type's columns). One type appears only in the second
run; a value that makes no table name, and one past `max_tables`, are dead letters with the
reason. Every table is read back without Spark (psycopg, deltalake, pyiceberg) and holds exactly
its records, by source offset. A crash between two tables' commits (a real `drainer run`
process exiting at the named crash point) is resumed by a run that writes only the tables
without the run's commit.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lifecycle_helpers import cli
from offsets import high_watermarks, stored_offsets
from sqlalchemy import text
from test_exactly_once import cli_run, runs_of

from dagster_project.metadata import run_metadata
from drainer import faults
from drainer.config import DrainConfig
from drainer.errors import BadRecord
from drainer.kafka.producer import OutRecord
from drainer.observe.status import drain_status
from drainer.settings import load_settings
from drainer.store import route_tables
from spark_jobs import drain_job
from spark_jobs.table_maintenance import maintain
from tests.support.event_types import DDL, FIELDS
from tests.support.stack import get_engine, produce_records

pytestmark = pytest.mark.slow

# `signups` appears only in the second run
FIRST = ["orders", "refunds", "clicks", "views"]
# per (level, partition, run): 3 levels x 2 partitions x 5,000 x 2 runs = 60,000 records
PER_PARTITION = 5_000
BAD_NAME = "not a name"  # a space: no table name, for any format
PAST_CAP = "zzz"  # a 6th type: past max_tables 5 (sorted after `signups`)


def routed_sink(kind: str, suffix: str) -> dict[str, Any]:
    common = {"value_schema_per_route": True, "max_tables": 5}
    if kind == "delta":
        return {"type": "delta", "path": f"routes_{suffix}/{{event_type}}", **common}
    if kind == "iceberg":
        return {"type": "iceberg", "table": f"r{suffix}.{{event_type}}", **common}
    return {"type": "postgres", "table": f"r{suffix}_{{event_type}}", **common}


def table_name(kind: str, suffix: str, event_type: str) -> str:
    if kind == "delta":
        return f"routes_{suffix}/{event_type}"
    if kind == "iceberg":
        return f"r{suffix}.{event_type}"
    return f"r{suffix}_{event_type}"


def produce(
    drain: DrainConfig,
    types: list[str],
    extra: tuple[str, ...] = (),
    per_partition: int = PER_PARTITION,
) -> None:
    """`per_partition` records to every (level, partition), cycling through `types`, then one
    record of each `extra` value at level 1, partition 0."""
    for level in range(drain.levels):
        for partition in range(drain.partitions):
            records = [
                OutRecord(
                    value=json.dumps(
                        {"event_type": types[i % len(types)], **FIELDS[types[i % len(types)]]}
                    ).encode(),
                    key=f"k{i % 7}".encode(),
                )
                for i in range(per_partition)
            ]
            produce_records(drain, records, level=level, partition=partition)
    bad = [OutRecord(value=json.dumps({"event_type": v}).encode(), key=b"x") for v in extra]
    if bad:
        produce_records(drain, bad, level=1, partition=0)


def rows_of(kind: str, name: str) -> list[dict[str, Any]]:
    """A routed table's rows, read without Spark."""
    settings = load_settings()
    if kind == "postgres":
        with get_engine().connect() as conn:
            return [dict(r) for r in conn.execute(text(f'SELECT * FROM "{name}"')).mappings()]
    if kind == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(Path(settings.warehouse) / name)).to_pyarrow_table().to_pylist()
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("drainer", uri=settings.database_url)
    return catalog.load_table(name).scan().to_arrow().to_pylist()


def dead_letters_of(drain: DrainConfig) -> list[dict[str, Any]]:
    with get_engine().connect() as conn:
        found = conn.execute(
            text(
                'SELECT topic, partition, "offset", value, error FROM dead_letters WHERE drain = :d'
            ),
            {"d": drain.name},
        ).mappings()
        return [dict(r) for r in found]


def assert_each_table_holds_exactly_its_records(
    drain: DrainConfig, kind: str, suffix: str, types: list[str], dead: int
) -> None:
    """Every table holds its type's records once, with its type's columns only; the tables plus
    the dead letters are every record of the topic, none twice; the offsets are at the end."""
    seen: Counter = Counter()
    for event_type in types:
        rows = rows_of(kind, table_name(kind, suffix, event_type))
        assert rows, f"table of {event_type} is empty"
        assert {r["event_type"] for r in rows} == {event_type}
        value_columns = {c for c in rows[0] if not c.startswith("_")} - {"event_type"}
        assert value_columns == set(FIELDS[event_type]), (event_type, value_columns)
        seen.update((r["_topic"], r["_partition"], r["_offset"]) for r in rows)
    letters = dead_letters_of(drain)
    assert len(letters) == dead
    lettered = Counter((d["topic"], d["partition"], d["offset"]) for d in letters)
    twice = [k for k, n in (seen + lettered).items() if n > 1]
    assert not twice, f"{len(twice)} records written twice, e.g. {twice[:3]}"
    high = high_watermarks(drain)
    expected = {(t, p, o) for (t, p), end in high.items() for o in range(end)}
    assert set(seen) | set(lettered) == expected
    assert stored_offsets(drain) == {k: (end, "") for k, end in high.items()}
    assert all(r.status == "committed" for r in runs_of(drain))


@pytest.mark.parametrize("kind", ["postgres", "delta", "iceberg"])
def test_one_run_routes_each_type_to_its_own_table_exactly_once(lakehouse, make_drain, kind):
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        value={"format": "json", "schema": DDL},
        bad_records="dead_letter",
        budget=40_000,
        sink=routed_sink(kind, suffix),
    )
    settings = load_settings()
    produce(drain, FIRST, extra=(BAD_NAME,))
    first = drain_job.run(drain.name, trigger="test", settings=settings)
    assert first.published_rows == 3 * 2 * PER_PARTITION
    with get_engine().connect() as conn:
        assert route_tables.registered(conn, drain.name) == sorted(
            table_name(kind, suffix, t) for t in FIRST
        )
    assert_each_table_holds_exactly_its_records(drain, kind, suffix, FIRST, dead=1)

    # the second run: a new type gets its table; the 6th would pass max_tables
    produce(drain, [*FIRST, "signups"], extra=(PAST_CAP,))
    second = drain_job.run(drain.name, trigger="test", settings=settings)
    assert_each_table_holds_exactly_its_records(drain, kind, suffix, [*FIRST, "signups"], dead=2)
    reasons = sorted(d["error"] for d in dead_letters_of(drain))
    assert any("does not make a table name" in r and BAD_NAME in r for r in reasons), reasons
    assert any("max_tables (5 tables)" in r and PAST_CAP in r for r in reasons), reasons
    # rows per table: the run's result, the Dagster metadata, `drainer status` (a Postgres
    # sink's as its commit recorded them, a table format's from its table commits)
    names = [table_name(kind, suffix, t) for t in [*FIRST, "signups"]]
    metadata = run_metadata(second)
    counts = {n: metadata[f"table_rows_{n}"].value for n in names}
    assert sum(counts.values()) == 3 * 2 * PER_PARTITION and counts[names[-1]] > 0
    assert second.table_rows == counts
    status = drain_status(drain, settings)
    assert [r["table_rows"] for r in status["runs"] if r["id"] == second.run_id] == [counts]
    if kind == "postgres":
        return  # its tables are kept by `drainer maintain` as any Postgres sink table: none
    done = maintain(drain, settings=settings)
    assert sorted(done["tables"]) == sorted(names)


@pytest.mark.parametrize("kind", ["delta", "iceberg", "postgres"])
def test_a_crash_between_two_tables_is_resumed_writing_only_the_others(lakehouse, make_drain, kind):
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        value={"format": "json", "schema": DDL},
        bad_records="dead_letter",
        budget=20_000,
        sink=routed_sink(kind, suffix),
    )
    produce(drain, FIRST, per_partition=1_000)
    crashed = cli_run(drain, faults.BETWEEN_TABLES)
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    assert f"injected fault at {faults.BETWEEN_TABLES}" in crashed.stderr
    # the race happened: the first table (in name order) holds the run, the rest nothing yet,
    # and Postgres has not moved
    assert set(stored_offsets(drain).values()) <= {(0, "")}
    first_table = table_name(kind, suffix, sorted(FIRST)[0])
    if kind != "postgres":  # a Postgres table publishes in the commit: nothing before it
        assert rows_of(kind, first_table)
        # one table holds the run: abandoning the plan would let the next plan write it again
        refused = cli("plan", "abandon", drain.name, "--reason", "looks stuck")
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert "already committed" in refused.stderr
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.resumed
    (run,) = runs_of(drain)
    assert_each_table_holds_exactly_its_records(drain, kind, suffix, FIRST, dead=0)
    if kind == "delta":  # each table holds one commit of the run: the first was not redone
        from deltalake import DeltaTable

        for event_type in FIRST:
            path = Path(load_settings().warehouse) / table_name(kind, suffix, event_type)
            writes = [h for h in DeltaTable(str(path)).history() if h.get("userMetadata")]
            assert len(writes) == 1, (event_type, writes)
            assert json.loads(writes[0]["userMetadata"])["drainer.run-id"] == run.id


@pytest.mark.parametrize("kind", ["postgres", "delta", "iceberg"])
def test_upsert_routes_each_table_keeping_one_row_per_key_of_its_own(lakehouse, make_drain, kind):
    """`write: upsert` with routing: each table keyed by the record key, the newest version of
    each key kept in its own type's table."""
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=1,
        partitions=1,
        value={"format": "json", "schema": DDL},
        key={"format": "string"},
        sink={**routed_sink(kind, suffix), "write": "upsert"},
    )
    types = ["orders", "clicks"]
    records = [
        OutRecord(
            value=json.dumps({"event_type": types[i % 2], **FIELDS[types[i % 2]]}).encode(),
            key=f"{types[i % 2]}-{i % 10 // 2}".encode(),  # 5 keys per type
        )
        for i in range(100)
    ]
    produce_records(drain, records, level=0, partition=0)
    drain_job.run(drain.name, trigger="test", settings=load_settings())
    for event_type in types:
        rows = rows_of(kind, table_name(kind, suffix, event_type))
        live = [r for r in rows if r.get("_deleted_at") is None]
        assert sorted(r["_key"] for r in live) == [f"{event_type}-{k}" for k in range(5)]
        newest = {
            f"{types[i % 2]}-{i % 10 // 2}": i for i in range(100) if types[i % 2] == event_type
        }
        assert {r["_key"]: r["_offset"] for r in live} == newest


def test_a_processors_route_value_that_names_no_table_fails_the_run_naming_it(
    lakehouse, make_drain
):
    """A processor makes the route column, so its rows are routed after it: a value that names
    no table fails the run in one line naming the value, and nothing is committed."""
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=2,
        partitions=1,
        value={"format": "string"},
        processor="tests.processors:kind_by_level",
        sink={"type": "delta", "path": f"routes_{suffix}/{{kind}}"},
    )
    for level in (0, 1):
        produce_records(drain, [OutRecord(value=b"v", key=b"k")] * 3, level=level, partition=0)
    with pytest.raises(BadRecord, match="'not a name' of kind does not make a table name") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value)
    assert set(stored_offsets(drain).values()) <= {(0, "")}
    assert not (Path(load_settings().warehouse) / f"routes_{suffix}").exists()


def test_a_routed_run_reads_its_records_once(lakehouse, make_drain, tmp_path, monkeypatch):
    """The route aggregate, the dead letters' staging and every table's write share one read:
    each record's value passes a UDF that notes it once (three reads before the decoded
    records were kept)."""
    from tests.processors import ROWS_SEEN_FILE, values_seen

    seen = tmp_path / "rows_seen"
    seen.touch()
    seen.chmod(0o666)
    monkeypatch.setenv(ROWS_SEEN_FILE, str(seen))
    read_ranges = drain_job.read_ranges
    monkeypatch.setattr(drain_job, "read_ranges", lambda *a, **k: values_seen(read_ranges(*a, **k)))
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=2,
        partitions=1,
        value={"format": "json", "schema": DDL},
        bad_records="dead_letter",
        sink=routed_sink("delta", suffix),
    )
    produce(drain, FIRST, per_partition=100, extra=(BAD_NAME,))
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.drained == 2 * 100 + 1
    assert len(dead_letters_of(drain)) == 1
    assert len(seen.read_text().splitlines()) == result.drained


@pytest.mark.parametrize("kind", ["delta", "postgres"])
def test_an_undecodable_record_fails_a_routed_run_before_any_table_is_written(
    lakehouse, make_drain, kind
):
    """`bad_records: fail` (the default): one record that does not decode fails the run naming
    it, though its route key names no table (each table's write filters by table, and the
    failure must not be filtered away with the rows of no table); nothing is written."""
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=2,
        partitions=1,
        value={"format": "json", "schema": DDL},
        sink=routed_sink(kind, suffix),
    )
    produce(drain, FIRST, per_partition=50)
    produce_records(drain, [OutRecord(value=b"{not json", key=b"x")], level=1, partition=0)
    with pytest.raises(BadRecord, match=r"record .*-1\[0\]@50 does not decode") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value)
    assert set(stored_offsets(drain).values()) <= {(0, "")}
    for event_type in FIRST:
        try:
            rows = rows_of(kind, table_name(kind, suffix, event_type))
        except Exception:  # no table made: the run wrote none
            rows = []
        assert rows == [], f"table of {event_type} got rows of a failed run"


@pytest.mark.parametrize("kind", ["postgres", "delta"])
def test_record_mode_routes_the_handlers_rows(lakehouse, make_drain, kind):
    """Record mode: the handler's rows are routed by its output column (`level`), each level's
    records in its own table, once."""
    from test_exactly_once import RECORD_MODE

    suffix = uuid.uuid4().hex[:8]
    table = f"r{suffix}_l{{level}}" if kind == "postgres" else f"routes_{suffix}/l{{level}}"
    drain = make_drain(
        levels=2,
        partitions=1,
        sink={"type": kind, ("table" if kind == "postgres" else "path"): table},
        **RECORD_MODE,
    )
    for level in (0, 1):
        produce_records(
            drain,
            [OutRecord(value=b"v", key=b"k%d" % i) for i in range(50)],
            level=level,
            partition=0,
        )
    drain_job.run(drain.name, trigger="test", settings=load_settings())
    for level in (0, 1):
        rows = rows_of(kind, table.replace("{level}", str(level)))
        assert sorted(r["offset"] for r in rows) == list(range(50))
        assert {r["level"] for r in rows} == {level}
    assert stored_offsets(drain) == {k: (end, "") for k, end in high_watermarks(drain).items()}


def test_a_route_map_sends_mapped_values_to_their_table_and_the_rest_to_the_default(
    lakehouse, make_drain, monkeypatch
):
    """Also the write of a run of many tables: its kept rows sorted by route key (from 3 tables
    here, `SORTED_FROM`), each table reading only its own cached batches. The drain's first
    such run sorts a second copy of the rows it kept unsorted; its next run keeps them sorted
    from the start, one copy."""
    from spark_jobs.sinks import routed

    sorts, kept = [], []
    monkeypatch.setattr(routed, "SORTED_FROM", 3)
    sort, keep = routed._sorted, routed._kept
    monkeypatch.setattr(routed, "_sorted", lambda keyed: sorts.append(1) or sort(keyed))
    monkeypatch.setattr(
        routed, "_kept", lambda keyed, by_key: kept.append(by_key) or keep(keyed, by_key)
    )
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=1,
        partitions=1,
        value={"format": "json", "schema": DDL},
        sink={
            "type": "iceberg",
            "route": {
                "by": "event_type",
                "tables": {"orders": f"r{suffix}.all_orders"},
                "default": f"r{suffix}.other_{{event_type}}",
            },
        },
    )
    types = ["orders", "clicks", "views"]
    records = [
        OutRecord(value=json.dumps({"event_type": t, **FIELDS[t]}).encode()) for t in types * 10
    ]
    for run in (1, 2):
        produce_records(drain, records, level=0, partition=0)
        drain_job.run(drain.name, trigger="test", settings=load_settings())
        for name, event_type in [
            (f"r{suffix}.all_orders", "orders"),
            (f"r{suffix}.other_clicks", "clicks"),
            (f"r{suffix}.other_views", "views"),
        ]:
            rows = rows_of("iceberg", name)
            assert len(rows) == 10 * run and {r["event_type"] for r in rows} == {event_type}
    # run 1 kept its rows unsorted (no table known yet) and sorted them again for its 3
    # tables; run 2 kept them sorted at once, and only that copy
    assert kept == [False, True]
    assert sorts == [1, 1]
