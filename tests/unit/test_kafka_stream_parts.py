"""The driver producer's parts (spark_jobs.sinks.kafka.stream.parts): a large run's staged rows
streamed as consecutive Spark partitions, each part below a byte bound, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.sinks.kafka.stream import parts


def test_partitions_are_packed_in_order_up_to_the_bound():
    assert parts({0: 5, 1: 5, 2: 5, 3: 20, 5: 1}, 10) == [(0, 1), (2, 2), (3, 3), (5, 5)]


def test_one_part_when_everything_fits_and_none_without_rows():
    assert parts({0: 1, 1: 1}, 10) == [(0, 1)]
    assert parts({}, 10) == []


@given(
    st.dictionaries(st.integers(0, 500), st.integers(0, 1000), max_size=60), st.integers(1, 3000)
)
def test_every_partition_is_in_one_part_and_each_part_keeps_the_bound(sizes, most):
    packed = parts(sizes, most)
    covered = [p for first, last in packed for p in sorted(sizes) if first <= p <= last]
    assert covered == sorted(sizes)  # each once, in order
    assert all(a[1] < b[0] for a, b in zip(packed, packed[1:], strict=False))
    for first, last in packed:
        held = [sizes[p] for p in sizes if first <= p <= last]
        assert sum(held) <= most or len(held) == 1
