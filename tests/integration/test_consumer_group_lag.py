"""Lag as monitors see it: Kafka's own consumer-group tool reads the drain's mirrored offsets."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import text

from drainer.kafka.producer import synthetic_records
from drainer.lifecycle.mirror import REFRESH_S
from drainer.services import kafka
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.integration.offsets import consumer_group_lag, mirrored_offsets
from tests.support.stack import get_engine, produce_records


def test_group_lag_is_the_remaining_backlog_then_zero(make_drain, spark):
    drain = make_drain(budget=2000, partitions=2)
    for level in range(3):
        produce_records(drain, synthetic_records(1000, seed=level), level=level)

    partial = drain_job.run(drain, trigger="test", settings=load_settings())
    assert partial.drained == 2000
    for lv in partial.levels:
        lag = consumer_group_lag(drain, lv.level)
        assert len(lag) == 2, lag  # both partitions of the level's topic have a committed offset
        assert sum(lag.values()) == lv.backlog_after, (lv, lag)
    assert sum(lv.backlog_after for lv in partial.levels) == 1000
    # Burrow calls a group whose offset stops while lag stays "stalled": mirroring again after
    # the run commits a level it left waiting, though nothing moved, and not an emptied one
    from drainer.kafka.session import KafkaSession
    from drainer.lifecycle.mirror import mirror_offsets

    waiting = [lv.level for lv in partial.levels if lv.backlog_after > 0]
    emptied = [lv.level for lv in partial.levels if lv.backlog_after == 0]
    assert waiting and emptied, partial.levels
    with KafkaSession(drain, load_settings()) as kafka:
        again = mirror_offsets(get_engine(), drain, kafka, levels=waiting, run_id=partial.run_id)
        assert again.partitions == 2 * len(waiting)
        quiet = mirror_offsets(get_engine(), drain, kafka, levels=emptied, run_id=partial.run_id)
        assert quiet.partitions == 0

    full = drain_job.run(drain, trigger="test", settings=load_settings())
    assert full.drained == 1000
    for level in range(3):
        assert set(consumer_group_lag(drain, level).values()) == {0}
    # what moved was mirrored; level 2, empty since the first run, has no lag to stall on and was
    # mirrored moments ago: not committed again
    assert full.mirror.partitions == 2 * 2
    assert full.mirror.not_moved_back == 0

    # an empty run makes no group commit, until an empty level's last mirror is REFRESH_S old
    assert drain_job.run(drain, trigger="test", settings=load_settings()).mirror.partitions == 0
    with get_engine().begin() as conn:
        conn.execute(
            text(
                "UPDATE partition_offsets SET mirrored_at = now() - make_interval(secs => :s) "
                "WHERE drain = :d AND level = 1"
            ),
            {"s": REFRESH_S + 60, "d": drain.name},
        )
    refreshed = drain_job.run(drain, trigger="test", settings=load_settings())
    assert refreshed.mirror.partitions == 2  # level 1's two partitions, so Kafka never expires them
    assert set(consumer_group_lag(drain, 1).values()) == {0}


def test_mirror_never_moves_a_group_backwards_without_a_rewind(make_drain, spark):
    from drainer.kafka.session import GroupCommit, KafkaSession
    from drainer.lifecycle.mirror import mirror_offsets
    from tests.support.stack import get_engine

    drain = make_drain(partitions=1)
    produce_records(drain, synthetic_records(50), level=0)
    drain_job.run(drain, levels=[0], trigger="test", settings=load_settings())
    topic = drain.level_topic(0)
    # something else committed the group ahead of the drain, and the level is due a refresh
    with get_engine().begin() as conn:
        conn.execute(
            text("UPDATE partition_offsets SET mirrored_at = NULL WHERE drain = :d"),
            {"d": drain.name},
        )
    with KafkaSession(drain, load_settings()) as kafka:
        assert kafka.commit_group_offsets({drain.level_group(0): [GroupCommit(topic, 0, 80)]}) == {}
        report = mirror_offsets(get_engine(), drain, kafka, levels=[0])

    assert report.not_moved_back == 1 and report.partitions == 0
    assert mirrored_offsets(drain, 0, [(topic, 0)])[(topic, 0)][0] == 80


# run in a child process, so that the crash this guards against fails the test, not pytest
_READ_ON_A_FRESH_BROKER = """
import json, sys
from drainer.config import DrainConfig
from drainer.kafka.session import GroupCommit, KafkaSession
from drainer.settings import load_settings

drain = DrainConfig(name="fresh", topic="fresh", group="fresh", levels=1, budget=10, partitions=1,
                    sink={"type": "postgres", "table": "fresh"})
with KafkaSession(drain, load_settings()) as kafka:
    before = kafka.group_offsets({"fresh-0": [("fresh-0", 0)]})
    kafka.create_topics()
    assert kafka.commit_group_offsets({"fresh-0": [GroupCommit("fresh-0", 0, 7, "map")]}) == {}
    after = kafka.group_offsets({"fresh-0": [("fresh-0", 0)]})
json.dump([before["fresh-0"][("fresh-0", 0)], after["fresh-0"][("fresh-0", 0)]], sys.stdout)
"""


def test_group_offsets_read_on_a_fresh_broker_whose_coordinator_still_loads(tmp_path):
    """The mirror's first read on a just-started broker: `__consumer_offsets` is still loading.

    It was read with the admin client's list_consumer_group_offsets, which librdkafka answers
    by dereferencing a null consumer group when refused NOT_COORDINATOR: the child died with
    SIGSEGV (exit -11) every time here, as `make demo` did on a fresh machine (librdkafka#5040).
    """
    isolated = dataclasses.replace(
        load_settings(), bootstrap_servers="127.0.0.1:19093", home=tmp_path
    )
    if not isolated.local_kafka:
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS is set; no local broker to start afresh")
    try:
        kafka.up(isolated, echo=lambda _: None)
        child = subprocess.run(
            [sys.executable, "-c", _READ_ON_A_FRESH_BROKER],
            env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": isolated.bootstrap_servers},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        kafka.stop(isolated, echo=lambda _: None)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    before, after = json.loads(child.stdout)
    assert before[0] < 0  # nothing committed yet
    assert after == [7, "map"]


def test_offsets_of_a_topic_the_drain_no_longer_reads_do_not_stop_its_group_mirror(
    make_drain, spark
):
    """A drain whose `topic` changed keeps the old topics' offsets in Postgres. Before: the
    mirror committed them with the rest of the level's group, Kafka refused the batch for the
    deleted topic ("Unknown topic or partition"), and the group stayed behind, run after run
    (the demo's `events_lake` printed three such warnings)."""
    drain = make_drain(budget=1000, partitions=2)
    produce_records(drain, synthetic_records(300, seed=1), level=0)
    assert drain_job.run(drain, trigger="test", settings=load_settings()).drained == 300
    with get_engine().begin() as conn:  # a topic of this drain's past, deleted since
        conn.execute(
            text(
                "INSERT INTO partition_offsets (drain, topic, partition, committed, level) "
                "VALUES (:d, :t, 0, 500, 0)"
            ),
            {"d": drain.name, "t": f"{drain.topic}_renamed-0"},
        )
    produce_records(drain, synthetic_records(200, seed=2), level=0)
    done = drain_job.run(drain, trigger="test", settings=load_settings())
    assert done.drained == 200
    assert done.mirror.error is None, done.mirror.error
    assert done.mirror.partitions == 2  # the level's two partitions, not the old topic's
    lag = consumer_group_lag(drain, 0)
    assert len(lag) == 2 and sum(lag.values()) == 0, lag  # the group is at the end
