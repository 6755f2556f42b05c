"""Issue 4 acceptance on the real stack: poison records in record mode.

1% of the records always raise (`poison_echo`); max_attempts is 3. Whatever the ordering, the
drain ends with every poison record dead-lettered (with its error, after 3 attempts), every
other record in the sink exactly once, and the offsets at the end. What the ordering decides is
*when* the rest runs, which the sink shows: each row carries the run that produced it.

- `partition`: the records after a failing one in its partition wait until it is dead-lettered;
  the other partitions go on;
- `key`: only the later records of the failing key wait, in offset order; other keys don't;
- `unordered`: nothing waits; the committed offset stops at the failure and the offset map
  (mirrored to Kafka as commit metadata) holds everything done above it.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from offsets import kafka_offsets, level_watermarks, states, stored_offsets
from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.kafka.producer import OutRecord
from drainer.lifecycle.run import RunResult
from drainer.offset_map import decode_offset_map
from drainer.settings import load_settings
from drainer.store.sink_names import RUN_COLUMN
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import get_engine, produce_records

PER_PARTITION = 100  # 3 levels x 2 partitions: 600 records
KEYS = 20
# (level, partition) -> poison offsets (6 of 600 = 1%): two in one key, two in two keys, and
# the first and the last record of a partition; the other three partitions are clean.
POISON = {(2, 0): (30, 70), (1, 1): (20, 60), (0, 0): (0, 99)}
SAME_KEY = {(2, 0): {10: 3, 30: 3, 50: 3, 70: 3, 90: 3}, (1, 1): {20: 5, 60: 6}}
MAX_ATTEMPTS = 3


def _layout() -> dict[tuple[int, int], list[OutRecord]]:
    rng = random.Random(7)
    layout = {}
    for level in range(3):
        for partition in range(2):
            forced = SAME_KEY.get((level, partition), {})
            poison = POISON.get((level, partition), ())
            records = []
            for offset in range(PER_PARTITION):
                key = f"l{level}p{partition}-k{forced.get(offset, rng.randrange(KEYS))}"
                value = (b"poison-" if offset in poison else b"ok-") + str(offset).encode()
                records.append(OutRecord(value=value, key=key.encode()))
            layout[(level, partition)] = records
    return layout


def _drain(make_drain, ordering: str) -> DrainConfig:
    return make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering=ordering,
        max_concurrency=8,
        max_attempts=MAX_ATTEMPTS,
    )


def _backlog(drain: DrainConfig) -> int:
    return sum(p.backlog for p in states(drain, [0, 1, 2]))


def _expected_runs(
    drain: DrainConfig,
    layout: dict[tuple[int, int], list[OutRecord]],
    ordering: str,
    runs: list[int],
    dead_run: dict[tuple[str, int, int], int],
) -> dict[tuple[str, int, int], int]:
    """The run that must have produced each good record's sink row, under the ordering.

    A record waits for every poison record before it in its chain (the partition, the key, or
    nothing) and runs in the run right after the last of those was dead-lettered.
    """
    next_run = dict(zip(runs, runs[1:], strict=False))
    expected = {}
    for (level, partition), records in layout.items():
        topic = drain.level_topic(level)
        waits_for: dict[object, int] = {}  # chain -> run its next record runs in
        for offset, record in enumerate(records):
            ident = (topic, partition, offset)
            chain = {"partition": partition, "key": record.key, "unordered": offset}[ordering]
            if record.value.startswith(b"poison"):
                waits_for[chain] = next_run.get(dead_run[ident])
            else:
                expected[ident] = waits_for.get(chain, runs[0])
    return expected


@pytest.mark.parametrize("ordering", ["partition", "key", "unordered"])
def test_poison_records_are_dead_lettered_and_the_rest_drains_once(make_drain, spark, ordering):
    drain = _drain(make_drain, ordering)
    layout = _layout()
    for (level, partition), records in layout.items():
        produce_records(drain, records, level=level, partition=partition)
    poison = {
        (drain.level_topic(level), partition, offset)
        for (level, partition), offsets in POISON.items()
        for offset in offsets
    }
    total = sum(len(r) for r in layout.values())
    assert len(poison) == total // 100  # 1%
    engine = get_engine()

    first = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert sum(lv.planned for lv in first.levels) == total
    _check_offsets_after_first_run(drain, layout, ordering, first)

    results: list[RunResult] = [first]
    while _backlog(drain) > 0:
        assert len(results) < 10, f"backlog {_backlog(drain)} left after {len(results)} runs"
        results.append(drain_job.run(drain.name, trigger="test", settings=load_settings()))
    runs = [r.run_id for r in results]
    # unordered: 3 attempts of everything at once; partition and key: two poison records in
    # one chain are attempted one after the other (3 + 3 runs), then the rest of the chain
    assert len(runs) == {"unordered": 3, "key": 7, "partition": 7}[ordering]

    with engine.connect() as conn:
        dead = conn.execute(
            text(
                'SELECT topic, partition, "offset", run_id, key, value, error, attempts, ts, '
                "retried_at FROM dead_letters WHERE drain = :d"
            ),
            {"d": drain.name},
        ).all()
        sink = conn.execute(
            text(
                f'SELECT topic, partition, "offset", key, "{RUN_COLUMN}" AS run FROM "{drain.sink.table}"'
            )
        ).all()
        leftovers = conn.scalar(
            text(
                "SELECT (SELECT count(*) FROM record_attempts WHERE drain = :d) + "
                "(SELECT count(*) FROM record_failures f JOIN runs r ON r.id = f.run_id "
                " WHERE r.drain = :d)"
            ),
            {"d": drain.name},
        )
        stats = conn.execute(
            text(
                "SELECT sum(drained) AS drained, sum(dead_lettered) AS dead, sum(failed) AS failed "
                "FROM run_levels rl JOIN runs r ON r.id = rl.run_id WHERE r.drain = :d"
            ),
            {"d": drain.name},
        ).one()

    # every poison record is a dead letter, with its error, after exactly max_attempts
    assert {(d.topic, d.partition, d.offset) for d in dead} == poison
    now = datetime.now(UTC)
    for d in dead:
        assert d.attempts == MAX_ATTEMPTS and d.retried_at is None
        assert abs(d.ts - now) < timedelta(minutes=10)  # the Kafka record's timestamp
        assert d.error.startswith("ValueError: poison record at ")
        assert f"{d.topic}[{d.partition}]@{d.offset}" in d.error
        level = int(d.topic.rsplit("-", 1)[1])
        original = layout[(level, d.partition)][d.offset]
        assert (bytes(d.key), bytes(d.value)) == (original.key, original.value)
    dead_run = {(d.topic, d.partition, d.offset): d.run_id for d in dead}
    assert leftovers == 0  # attempts and failures are cleared once settled
    # per-level stats count each record once; each poison record fails once per attempt
    assert (stats.drained, stats.dead, stats.failed) == (total, len(poison), 3 * len(poison))

    # every other record is in the sink exactly once, produced by the run the ordering implies
    rows = Counter((r.topic, r.partition, r.offset) for r in sink)
    assert max(rows.values()) == 1
    produced_by = {(r.topic, r.partition, r.offset): r.run for r in sink}
    expected = _expected_runs(drain, layout, ordering, runs, dead_run)
    assert set(produced_by) == set(expected)  # all good records, no poison one
    wrong = {k: (produced_by[k], v) for k, v in expected.items() if produced_by[k] != v}
    assert not wrong, f"records produced by the wrong run (got, expected): {wrong}"
    if ordering != "unordered":
        # the two poison records sharing a chain were attempted one after the other
        for (level, partition), (a, b) in POISON.items():
            topic = drain.level_topic(level)
            same_chain = ordering == "partition" or (
                layout[(level, partition)][a].key == layout[(level, partition)][b].key
            )
            gap = runs.index(dead_run[(topic, partition, b)]) - runs.index(
                dead_run[(topic, partition, a)]
            )
            assert gap == (MAX_ATTEMPTS if same_chain else 0), (level, partition)
    else:
        assert set(dead_run.values()) == {runs[MAX_ATTEMPTS - 1]}

    # offsets at the end, in Postgres and in the Kafka groups
    marks = level_watermarks(drain, range(3))
    high = {(drain.level_topic(lvl), p): wm.high for (lvl, p), wm in marks.items()}
    assert stored_offsets(drain) == {k: (end, "") for k, end in high.items()}
    assert {k: v[0] for k, v in kafka_offsets(drain).items()} == high


def _check_offsets_after_first_run(drain, layout, ordering, first: RunResult) -> None:
    """After one run: committed offset at the first not-done record, the done ones above it in
    the offset map, and both mirrored to the Kafka group (offset map as commit metadata)."""
    stored = stored_offsets(drain)
    mirrored = kafka_offsets(drain)
    failed = {level: 0 for level in range(drain.levels)}
    for (level, partition), records in layout.items():
        topic = drain.level_topic(level)
        poison_at = POISON.get((level, partition), ())
        blocked_keys: set[bytes] = set()
        not_done = set()
        for offset, record in enumerate(records):
            held_back = (ordering == "partition" and bool(not_done)) or (
                ordering == "key" and record.key in blocked_keys
            )
            if offset in poison_at and not held_back:
                failed[level] += 1
            if offset in poison_at or held_back:
                not_done.add(offset)
                blocked_keys.add(record.key)
        committed, offset_map = stored[(topic, partition)]
        expected_committed = min(not_done, default=len(records))
        assert committed == expected_committed, (topic, partition)
        assert decode_offset_map(committed, offset_map) == {
            o for o in range(committed + 1, len(records)) if o not in not_done
        }
        assert mirrored[(topic, partition)] == (committed, offset_map)
    # failed: attempted and raised; the poison records that were held back were not attempted
    assert {lv.level: lv.failed for lv in first.levels} == failed
