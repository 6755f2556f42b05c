"""Lag as monitors see it: Kafka's own consumer-group tool reads the drain's mirrored offsets."""

from __future__ import annotations

from drainer.kafka.producer import produce_records, synthetic_records
from spark_jobs import drain_job
from tests.integration.offsets import consumer_group_lag, mirrored_offsets


def test_group_lag_is_the_remaining_backlog_then_zero(make_drain, spark):
    drain = make_drain(budget=2000, partitions=2)
    for level in range(3):
        produce_records(drain, synthetic_records(1000, seed=level), level=level)

    partial = drain_job.run(drain, trigger="test")
    assert partial.drained == 2000
    for lv in partial.levels:
        lag = consumer_group_lag(drain, lv.level)
        assert len(lag) == 2, lag  # both partitions of the level's topic have a committed offset
        assert sum(lag.values()) == lv.backlog_after, (lv, lag)
    assert sum(lv.backlog_after for lv in partial.levels) == 1000

    full = drain_job.run(drain, trigger="test")
    assert full.drained == 1000
    for level in range(3):
        assert set(consumer_group_lag(drain, level).values()) == {0}
    # every partition of every covered level was committed again, moved or not (level 2 was
    # already empty after the first run), so monitors see a live consumer, not a dead one
    assert full.mirror.partitions == 3 * 2
    assert full.mirror.not_moved_back == 0


def test_mirror_never_moves_a_group_backwards_without_a_rewind(make_drain, spark):
    from drainer.kafka.mirror import mirror_offsets
    from drainer.kafka.session import GroupCommit, KafkaSession
    from drainer.store import get_engine

    drain = make_drain(partitions=1)
    produce_records(drain, synthetic_records(50), level=0)
    drain_job.run(drain, levels=[0], trigger="test")
    topic = drain.level_topic(0)
    # something else committed the group ahead of the drain
    with KafkaSession(drain) as kafka:
        assert kafka.commit_group_offsets({drain.level_group(0): [GroupCommit(topic, 0, 80)]}) == {}
        report = mirror_offsets(get_engine(), drain, kafka, levels=[0])

    assert report.not_moved_back == 1 and report.partitions == 0
    assert mirrored_offsets(drain, 0, [(topic, 0)])[(topic, 0)][0] == 80
