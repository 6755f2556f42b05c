"""Issue 48 on the real stack: state tables (`sink.write: upsert`) in Postgres, Delta and Iceberg.

JSON values `{id, name, v, op}` keyed by id over 3 levels, versions spread so that a key's newer
version often sits in a higher level than an older one (a higher level drains first), 100 keys
deleted by `op = 'd'` and 50 by tombstones (Kafka nulls), some deletes followed in drain order
by older updates. The table, read back without Spark (psycopg, deltalake, pyiceberg), must equal
the model: per key the newest version by `v`, absent when that is a delete.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import text
from test_exactly_once import cli_run, drain_until_empty, runs_of

from drainer.config import DrainConfig
from drainer.settings import load_settings
from tests.support.stack import get_engine

pytestmark = pytest.mark.slow

KEYS = 1000
VERSIONS = 10  # per key: 10,000 records, tombstones among them
OP_DELETES = 100
TOMBSTONES = 50
VALUE = {"format": "json", "schema": "id string, name string, v long, op string"}


def sink_of(fmt: str) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    upsert = {"write": "upsert", "order_by": ["v"], "delete_when": "op = 'd'"}
    if fmt == "postgres":
        return {"type": "postgres", "table": f"state_{suffix}", **upsert}
    if fmt == "delta":
        return {"type": "delta", "path": f"state_{suffix}", **upsert}
    return {"type": "iceberg", "table": f"drains.state_{suffix}", **upsert}


def produce_state(
    drain: DrainConfig, seed: int = 48, tombstones: int = TOMBSTONES
) -> dict[str, tuple[str, int]]:
    """The records, produced; returns the model: key -> (name, v) of its live newest version.

    Each key's versions 1..n go to random levels, in ascending v within a (level, partition)
    as a producer writes them. A deleted key's newest version is in the top level (drained
    first, before its older versions in lower levels); a tombstone follows its key's newest
    version in the same partition (`tombstones` keys have one).
    """
    rng = random.Random(seed)
    keys = [f"k{i:04d}" for i in range(KEYS)]
    deleted = set(rng.sample(keys, OP_DELETES))
    tombstoned = set(rng.sample([k for k in keys if k not in deleted], tombstones))
    per_topic: dict[tuple[int, int], list[tuple[str, bytes | None]]] = {}
    model: dict[str, tuple[str, int]] = {}
    for key in keys:
        partition = int(key[1:]) % drain.partitions
        versions = VERSIONS - 1 if key in tombstoned else VERSIONS
        levels = [rng.randrange(drain.levels) for _ in range(versions)]
        if key in deleted:
            levels[-1] = drain.levels - 1
        for v, level in enumerate(levels, start=1):
            op = "d" if key in deleted and v == versions else ("c" if v == 1 else "u")
            value = {"id": key, "name": f"{key}-v{v}", "v": v, "op": op}
            per_topic.setdefault((level, partition), []).append((key, json.dumps(value).encode()))
        if key in tombstoned:
            per_topic[(levels[-1], partition)].append((key, None))
        if key not in deleted and key not in tombstoned:
            model[key] = (f"{key}-v{versions}", versions)
    producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
    for (level, partition), records in per_topic.items():
        for key, value in records:
            producer.produce(
                drain.level_topic(level), key=key.encode(), value=value, partition=partition
            )
    assert producer.flush(60) == 0
    return model


def live_rows(drain: DrainConfig) -> dict[str, tuple[str, int]]:
    """The table's live rows, read without Spark: key -> (name, v)."""
    settings = load_settings()
    sink = drain.sink
    if sink.type == "postgres":
        with get_engine().connect() as conn:
            rows = conn.execute(text(f'SELECT _key, name, v FROM "{sink.table}_live"')).all()
        return {r._key: (r.name, r.v) for r in rows}
    if sink.type == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(str(Path(settings.warehouse) / sink.path)).to_pyarrow_table()
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("drainer", uri=settings.database_url)
        table = catalog.load_table(sink.table).scan(row_filter="_deleted_at IS NULL").to_arrow()
    rows = table.select(["_key", "name", "v", "_deleted_at"]).to_pylist()
    keys = [r["_key"] for r in rows]
    assert len(keys) == len(set(keys)), "a key twice in the table"
    return {r["_key"]: (r["name"], r["v"]) for r in rows if r["_deleted_at"] is None}


def upsert_drain(make_drain, fmt: str, budget: int) -> DrainConfig:
    return make_drain(
        sink=sink_of(fmt), budget=budget, value=VALUE, key={"format": "string"}, processor=None
    )


@pytest.mark.parametrize("budget,runs", [(12_000, 1), (2_100, 5)])
@pytest.mark.parametrize("fmt", ["postgres", "delta", "iceberg"])
def test_state_table_equals_the_model(make_drain, lakehouse, fmt, budget, runs):
    drain = upsert_drain(make_drain, fmt, budget)
    model = produce_state(drain)
    results = drain_until_empty(drain)
    assert len(results) == runs
    live = live_rows(drain)
    wrong = {
        k: (live.get(k), model.get(k))
        for k in set(live) | set(model)
        if live.get(k) != model.get(k)
    }
    assert not wrong, (
        f"{len(wrong)} keys differ from the model (table, model): {list(wrong.items())[:5]}"
    )
    assert len(live) == KEYS - OP_DELETES - TOMBSTONES
    if runs == 1:  # the merge's counts, on the run's record and in its result
        from drainer.observe.status import drain_status

        [run] = drain_status(drain, load_settings())["runs"]
        counts = {
            "rows_inserted": len(model),
            "rows_updated": 0,
            "rows_deleted": OP_DELETES + TOMBSTONES,
            "rows_skipped_older": 0,
        }
        assert run["upsert"] == counts
        assert results[0].upsert == counts
    else:  # every run's merge counted: each key once per run it had versions in
        from drainer.observe.status import drain_status

        shown = drain_status(drain, load_settings())["runs"]
        assert len(shown) == runs and all(r["upsert"] for r in shown)
        # a live key was inserted (or revived) at least once, a deleted one deleted
        assert sum(r["upsert"]["rows_inserted"] for r in shown) >= len(model)
        assert sum(r["upsert"]["rows_deleted"] for r in shown) >= OP_DELETES + TOMBSTONES


def test_a_changed_primary_key_is_refused_in_one_line(make_drain, stack):
    drain = upsert_drain(make_drain, "postgres", 12_000)
    produce_state(drain)
    drain_until_empty(drain)
    other = make_drain(
        sink={**drain.sink.model_dump(), "primary_key": ["id"]},
        budget=12_000,
        value=VALUE,
        key={"format": "string"},
        processor=None,
    )
    produce_state(other)
    done = cli_run(other)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "was made with primary key [_key]" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_iceberg_table_with_a_partition_column_is_refused_in_one_line(make_drain, lakehouse):
    """A state table made outside drainer with a `_partition` column (Iceberg's metadata
    column's name; drainer's own keep `_kafka_partition`): Iceberg would refuse the MERGE deep
    in the write with a Java stack trace; the run says so in one line first."""
    from spark_jobs.session import get_spark
    from spark_jobs.sinks import spark_sink_for

    drain = upsert_drain(make_drain, "iceberg", 12_000)
    produce_state(drain)
    settings = load_settings()
    conf = spark_sink_for(drain.sink, settings, drain.name).session_conf()
    spark = get_spark(settings, sink_conf=conf)
    table = f"drainer.{drain.sink.table}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    spark.sql(
        f"CREATE TABLE {table} (id string, name string, v long, op string, _partition int, "
        "_key string, _deleted_at timestamp) USING iceberg "
        "TBLPROPERTIES ('format-version' = '2', 'drainer.primary_key' = '_key')"
    )
    done = cli_run(drain)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{table} has a column _partition" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "committed" not in [r.status for r in runs_of(drain)]
    assert spark.table(table).count() == 0  # nothing written


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_resumed_run_never_merges_twice(make_drain, lakehouse, fmt):
    drain = upsert_drain(make_drain, fmt, 12_000)
    model = produce_state(drain)
    crashed = cli_run(drain, "after_table_commit")
    assert crashed.returncode == 86, crashed.stderr[-2000:]
    done = cli_run(drain)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r.status for r in runs_of(drain)] == ["committed"]
    assert live_rows(drain) == model
    # the table holds one merge of the run: its commits that name a run are the run's one
    assert merge_commits(drain) == [runs_of(drain)[0].id]
    if fmt == "delta":  # the resumed run reports the counts of the merge it found
        from drainer.observe.status import drain_status

        [run] = drain_status(drain, load_settings())["runs"]
        assert run["upsert"] == {
            "rows_inserted": len(model),
            "rows_updated": 0,
            "rows_deleted": OP_DELETES + TOMBSTONES,
            "rows_skipped_older": 0,
        }


def table_rows(drain: DrainConfig) -> tuple[set[str], list[dict[str, Any]]]:
    """The state table's columns and rows, read without Spark (psycopg, deltalake, pyiceberg)."""
    settings, sink = load_settings(), drain.sink
    if sink.type == "postgres":
        with get_engine().connect() as conn:
            found = conn.execute(text(f'SELECT * FROM "{sink.table}"')).mappings().all()
        rows = [dict(r) for r in found]
        # less the run id a Postgres table keeps for its own bookkeeping (`drainer.sinks`)
        return {c for c in rows[0] if c != "_drainer_run_id"}, rows
    if sink.type == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(str(Path(settings.warehouse) / sink.path)).to_pyarrow_table()
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("drainer", uri=settings.database_url)
        table = catalog.load_table(sink.table).scan().to_arrow()
    return set(table.column_names), table.to_pylist()


@pytest.mark.parametrize("fmt", ["postgres", "delta", "iceberg"])
def test_a_state_table_writing_no_metadata_still_breaks_ties_by_level(make_drain, lakehouse, fmt):
    """`metadata_columns: []`: the table holds the value's columns and its delete marker only,
    while the run still breaks a tie of equal `order_by` by level (read, not written), and a
    bad record's dead letter still names its topic, partition and offset."""
    drain = make_drain(
        sink={**sink_of(fmt), "primary_key": ["id"]},
        budget=1_000,
        value=VALUE,
        metadata_columns=[],
        bad_records="dead_letter",
        processor=None,
    )
    producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})

    def send(level: int, key: str, v: int, name: str, op: str = "u") -> None:
        value = json.dumps({"id": key, "name": name, "v": v, "op": op}).encode()
        producer.produce(drain.level_topic(level), key=key.encode(), value=value, partition=0)

    model: dict[str, tuple[str, int]] = {}
    for i in range(30):  # first on the lowest level: its tied versions get the higher offsets
        send(0, f"f{i:02d}", 1, "filler")
        model[f"f{i:02d}"] = ("filler", 1)
    for i in range(30):  # each key's v=1 on the lowest and on the top level: the top one wins
        key = f"k{i:02d}"
        send(0, key, 1, "low")
        send(drain.levels - 1, key, 1, "high")
        model[key] = ("high", 1)
    for i in range(5):  # newer on the lowest level: the order wins over the level
        send(0, f"k{i:02d}", 2, "newer")
        model[f"k{i:02d}"] = ("newer", 2)
    for i in range(25, 30):  # deleted
        send(1, f"k{i:02d}", 3, "gone", op="d")
        del model[f"k{i:02d}"]
    producer.produce(drain.level_topic(1), key=b"bad", value=b"{", partition=0)
    assert producer.flush(30) == 0
    drain_until_empty(drain)
    columns, rows = table_rows(drain)
    assert columns == {"id", "name", "v", "op", "_deleted_at"}, columns
    live = {r["id"]: (r["name"], r["v"]) for r in rows if r["_deleted_at"] is None}
    assert live == model
    with get_engine().connect() as conn:
        dead = conn.execute(
            text('SELECT topic, partition, "offset" FROM dead_letters WHERE drain = :d'),
            {"d": drain.name},
        ).all()
    assert [tuple(d) for d in dead] == [(drain.level_topic(1), 0, 5)], dead


def test_a_delta_merge_without_deletes_counts_from_its_commit(make_drain, lakehouse):
    """A Delta run without deletes into a table it did not make takes its counts from its
    MERGE commit's metrics (`MergeMetered`) and the keys it revives from delete markers: each
    count as the join against the table gives it, in a run and in a resumed run that finds
    the commit."""
    from drainer.observe.status import drain_status

    drain = make_drain(
        sink=sink_of("delta"), budget=1_000, value=VALUE, key={"format": "string"}, processor=None
    )

    def produce(values: list[tuple[str, int, str]]) -> None:
        producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
        for key, v, op in values:
            value = json.dumps({"id": key, "name": f"{key}-v{v}", "v": v, "op": op})
            producer.produce(drain.level_topic(0), key=key.encode(), value=value.encode())
        assert producer.flush(30) == 0

    # the table, made by the first run: k0-k9 at v=5, k0-k2 then deleted (markers at v=6)
    produce([(f"k{i}", 5, "c") for i in range(10)] + [(f"k{i}", 6, "d") for i in range(3)])
    assert cli_run(drain).returncode == 0
    # no deletes: k0 revived (newer than its marker), k1 older than its marker, k3 updated,
    # k4 older than its row, k20 and k21 new
    produce([("k0", 7, "u"), ("k1", 4, "u"), ("k3", 8, "u"), ("k4", 1, "u")])
    produce([("k20", 1, "c"), ("k21", 1, "c")])
    crashed = cli_run(drain, "after_table_commit")
    assert crashed.returncode == 86, crashed.stderr[-2000:]
    assert cli_run(drain).returncode == 0  # resumed: the counts from the commit it finds
    expected = {"rows_inserted": 3, "rows_updated": 1, "rows_deleted": 0, "rows_skipped_older": 2}
    # and a run that lands at once: k5 updated, k22 new, k6 older
    produce([("k5", 9, "u"), ("k22", 1, "c"), ("k6", 2, "u")])
    assert cli_run(drain).returncode == 0
    runs = sorted(drain_status(drain, load_settings())["runs"], key=lambda r: r["id"])
    landed = {"rows_inserted": 1, "rows_updated": 1, "rows_deleted": 0, "rows_skipped_older": 1}
    assert [r["upsert"] for r in runs[-2:]] == [expected, landed], runs
    assert set(live_rows(drain)) == {f"k{i}" for i in (0, *range(3, 10), 20, 21, 22)}


def test_a_delta_table_is_made_over_the_files_a_dead_attempt_left(make_drain, lakehouse):
    """A run makes its Delta state table with its rows in one commit (CREATE TABLE AS SELECT):
    an attempt that died while writing it leaves files in the folder and no Delta log, which
    Delta's create takes for a table that exists. The next attempt makes the table over them,
    with its key, and it holds the model."""
    from deltalake import DeltaTable

    drain = upsert_drain(make_drain, "delta", 12_000)
    model = produce_state(drain)
    folder = Path(load_settings().warehouse) / drain.sink.path
    folder.mkdir(parents=True)
    (folder / "part-00000-left-by-a-dead-attempt.c000.snappy.parquet").write_bytes(b"partial")
    [result] = drain_until_empty(drain)
    assert live_rows(drain) == model
    assert result.upsert["rows_inserted"] == len(model)
    assert merge_commits(drain) == [result.run_id]
    assert DeltaTable(str(folder)).metadata().configuration["drainer.primary_key"] == "_key"


def test_a_delta_table_made_after_the_runs_look_is_merged_into(make_drain, lakehouse, monkeypatch):
    """Another attempt of the run made the table between this attempt's look for it and its
    create: the create is refused, and the run merges into the table instead (the same
    transaction: Delta would skip it, were that attempt's commit the run's)."""
    from spark_jobs.sinks.delta import DeltaSparkSink

    drain = upsert_drain(make_drain, "delta", 6_000)  # two runs
    model = produce_state(drain)
    first = drain_job_run(drain)  # makes the table
    looked = DeltaSparkSink._schema
    looks: list[bool] = []

    def missed_once(self, spark):  # the next run's first look finds no table
        looks.append(True)
        return None if len(looks) == 1 else looked(self, spark)

    monkeypatch.setattr(DeltaSparkSink, "_schema", missed_once)
    results = [first, *drain_until_empty(drain)]
    assert len(looks) > 1, "the run did not look again after its create was refused"
    assert live_rows(drain) == model
    assert merge_commits(drain) == [r.run_id for r in results]


def drain_job_run(drain: DrainConfig):
    from spark_jobs import drain_job

    return drain_job.run(drain.name, trigger="test", settings=load_settings())


@pytest.mark.parametrize("tombstones", [0, TOMBSTONES], ids=["no_tombstones", "tombstones"])
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_merge_reads_the_runs_records_once(
    make_drain, lakehouse, tmp_path, monkeypatch, fmt, tombstones
):
    """The counts and the MERGE share one read: every record passes the processor's UDF once
    (the counts before the MERGE read them a second time before the collapsed rows were cached;
    a plan holding `current_timestamp()` missed that cache). A run with tombstones that take
    their order from the version before them (`order_by: [v]`) reads its records a second time
    to collapse those keys again (spark_jobs.sinks.upsert `read_once`), never a third."""
    from tests.processors import ROWS_SEEN_FILE

    seen = tmp_path / "rows_seen"
    seen.touch()
    seen.chmod(0o666)
    monkeypatch.setenv(ROWS_SEEN_FILE, str(seen))
    drain = make_drain(
        sink=sink_of(fmt),
        budget=12_000,
        value=VALUE,
        key={"format": "string"},
        processor="tests.processors:keys_seen",
    )
    model = produce_state(drain, tombstones=tombstones)
    [result] = drain_until_empty(drain)
    assert live_rows(drain) == model
    assert result.upsert["rows_inserted"] == len(model)
    assert result.drained == KEYS * VERSIONS
    reads = 2 if tombstones else 1
    assert len(seen.read_text().splitlines()) == reads * result.drained


def merge_commits(drain: DrainConfig) -> list[int]:
    """The run ids the table's commits carry (read without Spark)."""
    from test_lakehouse import table_run_ids

    return table_run_ids(drain)


def test_the_docs_example_runs_as_written(lakehouse, tmp_path, monkeypatch):
    """docs/state-tables.md's drains file, names made unique, drains a key's versions and a
    delete; its Delta reader line reads the live rows."""
    import pyarrow.compute as pc  # noqa: F401  (the docs' reader line uses it)
    import yaml
    from deltalake import DeltaTable  # noqa: F401
    from test_docs_run import blocks

    from drainer.config import load_drains
    from drainer.kafka.session import KafkaSession
    from drainer.settings import use_config_path
    from tests.support.drains import delete_topics

    example, *others = blocks("docs/state-tables.md", "yaml")
    for i, other in enumerate(others):  # the other examples are valid drains files
        (tmp_path / f"other{i}.yaml").write_text(other)
        assert load_drains(tmp_path / f"other{i}.yaml")
    suffix = uuid.uuid4().hex[:8]
    body = yaml.safe_load(example)["drains"]["customers"]
    body |= {"topic": f"customers_{suffix}", "group": f"customers_{suffix}"}
    body["sink"]["path"] = f"lake/customers_{suffix}"
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {f"customers_{suffix}": body}}))
    drain = load_drains(path)[f"customers_{suffix}"]
    with KafkaSession(drain, load_settings()) as kafka:
        kafka.create_topics()
    try:
        producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
        for level, (key, v, op) in [(0, ("a", 1, "c")), (2, ("a", 2, "u")), (1, ("b", 1, "c"))]:
            value = json.dumps({"id": key, "name": f"{key}{v}", "v": v, "op": op})
            producer.produce(drain.level_topic(level), key=key.encode(), value=value.encode())
        producer.produce(drain.level_topic(0), key=b"b", value=b'{"id":"b","v":2,"op":"d"}')
        assert producer.flush(30) == 0
        with use_config_path(path):
            drain_until_empty(drain)
        where = str(Path(load_settings().warehouse) / body["sink"]["path"])
        doc = Path(__file__).resolve().parents[2] / "docs" / "state-tables.md"
        line = next(ln for ln in doc.read_text().splitlines() if "DeltaTable(path)" in ln)
        reader = line[line.index("`") + 1 : line.rindex("`")]
        live = eval(reader, {"DeltaTable": DeltaTable, "pc": pc, "path": where})  # noqa: S307
        assert {(r["id"], r["v"]) for r in live.to_pylist()} == {("a", 2)}
    finally:
        delete_topics(drain)


ROW = "id long, name string, qty long"


def debezium_events(wrapped: bool) -> tuple[list[tuple[bytes, bytes | None]], dict[int, tuple]]:
    """A source table's changes as Debezium's JSON converter writes them (with its
    `schema`/`payload` wrapper or without), a delete followed by its tombstone; and the source
    table's final state, id -> (name, qty)."""
    rng = random.Random(7)
    state: dict[int, tuple[str, int]] = {}
    events: list[tuple[bytes, bytes | None]] = []
    lsn = 1000

    def wrap(payload: dict[str, Any]) -> bytes:
        body = {"schema": {"type": "struct", "optional": False}, "payload": payload}
        return json.dumps(body if wrapped else payload).encode()

    for step in range(400):
        id_ = rng.randrange(60)
        lsn += 1
        source = {"ts_ms": 1_700_000_000_000 + step, "lsn": lsn, "connector": "postgresql"}
        key = wrap({"id": id_})
        before = {"id": id_, "name": state[id_][0], "qty": state[id_][1]} if id_ in state else None
        if id_ in state and rng.random() < 0.2:
            events.append(
                (key, wrap({"before": before, "after": None, "op": "d", "source": source}))
            )
            events.append((key, None))  # Debezium's tombstone, for compaction
            del state[id_]
            continue
        after = {"id": id_, "name": f"n{step}", "qty": step}
        op = "u" if id_ in state else rng.choice("cr")
        events.append((key, wrap({"before": before, "after": after, "op": op, "source": source})))
        state[id_] = (after["name"], after["qty"])
    return events, state


@pytest.mark.parametrize("wrapped", [True, False], ids=["with_schema", "without_schema"])
@pytest.mark.parametrize("fmt", ["postgres", "delta", "iceberg"])
def test_debezium_changes_leave_the_source_tables_state(make_drain, lakehouse, fmt, wrapped):
    sink = {k: v for k, v in sink_of(fmt).items() if k not in ("order_by", "delete_when")}
    # Postgres stores no struct: the key as its JSON text there
    key = (
        {"format": "string"}
        if fmt == "postgres"
        else {"format": "json", "schema": "id long", "envelope": "debezium"}
    )
    drain = make_drain(
        sink=sink,
        budget=12_000,
        levels=1,
        partitions=1,
        value={"format": "json", "schema": ROW, "envelope": "debezium"},
        key=key,
        processor=None,
    )
    events, state = debezium_events(wrapped)
    assert state and sum(v is None for _, v in events) > 10  # deletes, each with its tombstone
    producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
    for k, v in events:
        producer.produce(drain.level_topic(0), key=k, value=v)
    assert producer.flush(30) == 0
    drain_until_empty(drain)
    assert cdc_rows(drain) == state


# the envelope as Debezium's Avro converter writes it for a Postgres table (id, name, qty)
DEBEZIUM_AVRO = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver1.inventory.items",
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {"name": "name", "type": ["null", "string"], "default": None},
                        {"name": "qty", "type": ["null", "long"], "default": None},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "fields": [
                    {"name": "version", "type": "string"},
                    {"name": "connector", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {"name": "lsn", "type": ["null", "long"], "default": None},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


@pytest.mark.parametrize("schema", ["avsc", "registry"])
@pytest.mark.parametrize("fmt", ["postgres", "delta", "iceberg"])
def test_debezium_avro_changes_leave_the_source_tables_state(
    make_drain, lakehouse, fmt, schema, tmp_path
):
    """The same changes as Debezium's Avro converter writes them (`value: {format: avro,
    envelope: debezium}`), from a schema file or in the Confluent wire format through a
    registry, a delete followed by its tombstone; the key as text."""
    import io

    from fastavro import parse_schema, schemaless_writer

    from drainer.config.formats import RegistryConfig
    from drainer.records.registry import frame, register

    if schema == "avsc":
        schema_file = tmp_path / "items-envelope.avsc"
        schema_file.write_text(json.dumps(DEBEZIUM_AVRO))
        value: dict[str, Any] = {"schema": str(schema_file)}
    else:
        value = {"registry": {"url": f"mock://drainer-{uuid.uuid4().hex[:8]}"}}
    parsed = parse_schema(DEBEZIUM_AVRO)
    sink = {k: v for k, v in sink_of(fmt).items() if k not in ("order_by", "delete_when")}
    drain = make_drain(
        sink=sink,
        budget=12_000,
        levels=1,
        partitions=1,
        value={"format": "avro", **value, "envelope": "debezium"},
        key={"format": "string"},
        processor=None,
    )
    if schema == "registry":
        writer = register(
            RegistryConfig(**value["registry"]), f"{drain.topic}-value", json.dumps(DEBEZIUM_AVRO)
        )
    events, state = debezium_events(wrapped=False)
    producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
    for k, v in events:
        key = str(json.loads(k)["id"]).encode()
        if v is None:  # the tombstone after a delete
            producer.produce(drain.level_topic(0), key=key, value=None)
            continue
        change = json.loads(v)
        change["source"] = {**change["source"], "version": "2.7.0"}
        change["ts_ms"] = change["source"]["ts_ms"] + 5
        out = io.BytesIO()
        schemaless_writer(out, parsed, change)
        body = out.getvalue() if schema == "avsc" else frame(writer, out.getvalue())
        producer.produce(drain.level_topic(0), key=key, value=body)
    assert producer.flush(30) == 0
    assert sum(v is None for _, v in events) > 10  # deletes, each with its tombstone
    drain_until_empty(drain)
    assert cdc_rows(drain) == state


def cdc_rows(drain: DrainConfig) -> dict[int, tuple[str, int]]:
    settings = load_settings()
    sink = drain.sink
    if sink.type == "postgres":
        with get_engine().connect() as conn:
            rows = conn.execute(text(f'SELECT id, name, qty FROM "{sink.table}_live"')).all()
        return {r.id: (r.name, r.qty) for r in rows}
    if sink.type == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(str(Path(settings.warehouse) / sink.path)).to_pyarrow_table()
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("drainer", uri=settings.database_url)
        table = catalog.load_table(sink.table).scan().to_arrow()
    return {
        r["id"]: (r["name"], r["qty"])
        for r in table.select(["id", "name", "qty", "_deleted_at"]).to_pylist()
        if r["_deleted_at"] is None
    }


@pytest.mark.parametrize("fmt", ["postgres", "delta", "iceberg"])
def test_maintain_removes_markers_past_their_retention(make_drain, lakehouse, fmt):
    import time

    from drainer.sinks import sink_for
    from spark_jobs.table_maintenance import maintain

    sink = sink_of(fmt) | {"delete_retention": "1s"}
    drain = make_drain(
        sink=sink, budget=12_000, value=VALUE, key={"format": "string"}, processor=None
    )
    model = produce_state(drain)
    drain_until_empty(drain)
    assert markers(drain) == OP_DELETES + TOMBSTONES
    time.sleep(2)  # the markers are older than their retention now
    if fmt == "postgres":
        sink_for(drain.sink, load_settings()).maintain(get_engine())
    else:
        report = maintain(drain, retention_hours=0, force=True, settings=load_settings())
        assert report["delete_markers_removed"] == OP_DELETES + TOMBSTONES
    assert markers(drain) == 0
    assert live_rows(drain) == model


def markers(drain: DrainConfig) -> int:
    settings = load_settings()
    sink = drain.sink
    if sink.type == "postgres":
        with get_engine().connect() as conn:
            return conn.scalar(
                text(f'SELECT count(*) FROM "{sink.table}" WHERE _deleted_at IS NOT NULL')
            )
    if sink.type == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(str(Path(settings.warehouse) / sink.path)).to_pyarrow_table()
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        table = SqlCatalog("drainer", uri=settings.database_url).load_table(sink.table)
        table = table.scan().to_arrow()
    return sum(r is not None for r in table.column("_deleted_at").to_pylist())
