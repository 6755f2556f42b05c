"""A small read of many partitions is the driver's (spark_jobs.driver_read, issue 51): the same
records as Spark's Kafka source on the same ranges, and a run that takes it drains each record
once, its values and headers as a run through Spark's source writes them."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from typing import Any

from confluent_kafka import Producer

from drainer.kafka.producer import OutRecord
from drainer.kafka.session import KafkaSession
from drainer.settings import load_settings
from spark_jobs.driver_read import DRIVER_READ_MIN_RANGES, DRIVER_READS, driver_read
from spark_jobs.session import KAFKA_SOURCE
from tests.support.stack import produce_records

LEVELS, PARTITIONS = 3, 12  # 36 ranges: the driver's to read
assert LEVELS * PARTITIONS >= DRIVER_READ_MIN_RANGES


def _records(level: int, partition: int, tombstone: bool = True) -> list[OutRecord]:
    """Values, a null key, a tombstone, and headers (none, one, a null header value)."""
    out = []
    for i in range(7):
        key = None if i == 3 else f"k{level}-{partition}-{i}".encode()
        body = json.dumps({"lvl": level, "p": partition, "i": i}).encode()
        value = None if i == 5 and tombstone else body
        headers: list[tuple[str, bytes | None]] = []
        if i % 2:
            headers = [("trace", f"t{i}".encode())] + ([("empty", None)] if i == 1 else [])
        out.append(OutRecord(value, key, headers))
    return out


def _produce(drain: Any) -> None:
    settings = load_settings()
    with KafkaSession(drain, settings) as kafka:
        for level in range(LEVELS):
            for partition in range(PARTITIONS):
                records = _records(level, partition)
                produce_records(drain, records, level, partition=partition, kafka=kafka)
    # a transaction aborted, then one committed: read_committed skips the first and both markers
    tx = Producer(
        {"bootstrap.servers": settings.bootstrap_servers, "transactional.id": uuid.uuid4().hex}
    )
    tx.init_transactions(30)
    for commit in (False, True):
        tx.begin_transaction()
        for i in range(3):
            body = json.dumps({"tx": commit, "i": i}).encode()
            tx.produce(drain.level_topic(0), body, partition=0)
        tx.flush(30)  # else an abort purges the records before they reach the log
        tx.commit_transaction(30) if commit else tx.abort_transaction(30)


def _ends(drain: Any) -> dict[tuple[str, int], tuple[int, int]]:
    with KafkaSession(drain, load_settings()) as kafka:
        marks = kafka.watermarks({level: list(range(PARTITIONS)) for level in range(LEVELS)})
    return {(drain.level_topic(lvl), p): (0, w.high) for (lvl, p), w in marks.items()}


def test_the_driver_reads_what_sparks_kafka_source_reads(make_drain, spark):
    drain = make_drain(levels=LEVELS, partitions=PARTITIONS, mode="dataframe")
    _produce(drain)
    bounds = _ends(drain)
    topic0 = drain.level_topic(0)
    assert (
        bounds[(topic0, 0)][1] == 7 + 3 + 1 + 3 + 1
    )  # records, aborted, marker, committed, marker

    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, p), (start, end) in bounds.items():
        assign.setdefault(topic, []).append(p)
        starting.setdefault(topic, {})[str(p)] = start
        ending.setdefault(topic, {})[str(p)] = end
    sparks = (
        spark.read.format(KAFKA_SOURCE)
        .option("kafka.bootstrap.servers", load_settings().bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .load()
    )
    settings = load_settings()
    stage = settings.home / DRIVER_READS / f"test-{uuid.uuid4().hex}"
    drivers = driver_read(spark, drain, settings.bootstrap_servers, bounds, stage, files=2)
    assert len(list(stage.glob("*.parquet"))) == 2
    assert [f.dataType for f in drivers.schema] == [f.dataType for f in sparks.schema]
    expected = sorted(map(tuple, sparks.collect()), key=lambda r: (r[2], r[3], r[4]))
    found = sorted(map(tuple, drivers.collect()), key=lambda r: (r[2], r[3], r[4]))
    assert len(expected) == LEVELS * PARTITIONS * 7 + 3
    assert found == expected
    committed = [r for r in found if r[2] == topic0 and r[3] == 0 and r[4] >= 7]
    assert [json.loads(r[1])["tx"] for r in committed] == [True] * 3  # the aborted ones skipped
    shutil.rmtree(stage)


def _drained_backlog(make_drain: Any, caplog: Any) -> tuple[Any, list[Any]]:
    """A drain of JSON values over the 36 ranges, its records produced (no tombstones: an
    append sink), drained until empty with the read's log captured; the drain and its runs."""
    from test_exactly_once import drain_until_empty

    drain = make_drain(
        levels=LEVELS,
        partitions=PARTITIONS,
        mode="dataframe",
        budget=100_000,
        value={"format": "json", "schema": "lvl int, p int, i int"},
    )
    with KafkaSession(drain, load_settings()) as kafka:
        for level in range(LEVELS):
            for partition in range(PARTITIONS):
                records = _records(level, partition, tombstone=False)
                produce_records(drain, records, level, partition=partition, kafka=kafka)
    with caplog.at_level(logging.INFO, logger="spark_jobs.kafka_source"):
        return drain, drain_until_empty(drain)


def test_a_run_of_many_small_ranges_reads_them_in_the_driver_once(make_drain, caplog):
    from test_record_formats import assert_each_offset_once, rows_of

    drain, results = _drained_backlog(make_drain, caplog)
    assert len(results) == 1 and results[0].drained == LEVELS * PARTITIONS * 7
    assert "read in the driver" in caplog.text  # the path under test was the one taken
    staged = load_settings().home / DRIVER_READS
    assert not list(staged.glob(f"drainer-{drain.name}-run-*")), "the run left its staged read"
    rows = rows_of(drain)
    assert_each_offset_once(drain, rows)
    by_offset = {(r["_topic"], r["_partition"], r["_offset"]): r for r in rows}
    one = by_offset[(drain.level_topic(2), 5, 1)]  # key, value and both headers as written
    assert bytes(one["_key"]) == b"k2-5-1" and (one["lvl"], one["p"], one["i"]) == (2, 5, 1)
    assert "trace" in str(one["_headers"]) and "empty" in str(one["_headers"])
    assert by_offset[(drain.level_topic(1), 0, 3)]["_key"] is None


def test_small_ranges_of_large_records_are_left_to_sparks_reader(make_drain, caplog, monkeypatch):
    """The plan counts records, not bytes: past the driver's byte cap the run reads the same
    ranges with Spark's source instead, and still drains each record once."""
    from test_record_formats import assert_each_offset_once, rows_of

    from spark_jobs import driver_read as module

    monkeypatch.setattr(module, "DRIVER_READ_MAX_BYTES", 1_000)  # ~40 records of these
    drain, results = _drained_backlog(make_drain, caplog)
    assert "too large for the driver's read: Spark reads them" in caplog.text
    assert "read in the driver" not in caplog.text
    assert sum(r.drained for r in results) == LEVELS * PARTITIONS * 7
    assert_each_offset_once(drain, rows_of(drain))
