"""Packed per-partition counts: what the Spark job's few sums add up to unpacks to each
partition's count, and a count past its bound is caught rather than trusted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drainer.offset_map import PartitionProgress
from drainer.read_counts import WORD_BITS, apportion, packing, within_bounds
from drainer.store.runs import StoredRange

keys = st.tuples(st.integers(0, 7), st.integers(0, 63))


@st.composite
def bounded_counts(draw: st.DrawFn) -> tuple[dict, dict]:
    bounds = draw(st.dictionaries(keys, st.integers(0, 10**12), min_size=1, max_size=40))
    counts = {key: draw(st.integers(0, bound)) for key, bound in bounds.items()}
    return bounds, counts


def _sums(pack, counts: dict) -> list[int]:
    """What the job's sums come to: each record adds 1 << its key's shift to its key's sum."""
    sums = [0] * pack.sums
    for key, n in counts.items():
        sums[pack.words[key]] += n << pack.shifts[key]
    return sums


@given(bounded_counts())
def test_counts_within_their_bounds_unpack_exactly_and_never_overflow_a_long(case):
    bounds, counts = case
    pack = packing(bounds)
    sums = _sums(pack, counts)
    assert all(0 <= s < 1 << WORD_BITS for s in sums)  # a Spark long's sum: no overflow
    unpacked = pack.unpack(sums)
    assert unpacked == counts
    assert within_bounds(unpacked, bounds, sum(counts.values()))


def test_twelve_partitions_of_a_million_records_take_four_sums_not_twelve():
    pack = packing({(level, p): 1_000_000 for level in range(3) for p in range(4)})
    assert pack.width == 20 and pack.sums == 4


@given(bounded_counts(), st.data())
def test_a_count_past_its_bound_is_not_trusted(case, data):
    bounds, counts = case
    key = data.draw(st.sampled_from(sorted(bounds)))
    pack = packing(bounds)
    counts[key] = bounds[key] + data.draw(st.integers(1, 2**pack.width))  # a duplicate read
    unpacked = pack.unpack(_sums(pack, counts))
    assert not within_bounds(unpacked, bounds, sum(counts.values()))


@given(st.integers(0, 10**15), st.dictionaries(keys, st.integers(0, 10**9), min_size=1))
def test_bytes_shared_out_by_records_add_up_and_follow_the_counts(total, counts):
    shares = apportion(total, counts)
    records = sum(counts.values())
    assert set(shares) == set(counts)
    if records == 0:
        assert set(shares.values()) == {0}
        return
    assert sum(shares.values()) == total
    for key, n in counts.items():
        assert abs(shares[key] - total * n / records) < 1 + 1e-9 * total  # within one byte
        if n == 0:
            assert shares[key] == 0


@given(
    start=st.integers(0, 10**6),
    span=st.integers(0, 500),
    moved=st.integers(0, 600),
    done=st.sets(st.integers(1, 600)),
)
def test_a_range_reads_at_most_its_offsets_less_the_done_ones(start, span, moved, done):
    """`StoredRange.readable_from`: the offsets a read of [start, end) returns at most, from
    where retention moved the start, less those the plan's offset map has done (done offsets
    below that start are not read anyway). A read whose total is the sum of these read
    exactly these many from each partition (`spark_jobs.kafka_source.counted`)."""
    end = start + span
    done_offsets = frozenset(start + d for d in done if start + d < end)
    text = PartitionProgress(start, done_offsets).encoded() if done_offsets else ""
    rng = StoredRange("t-0", 0, 0, start, end, text, span)
    first = start + moved
    assert rng.readable_from(first) == len([o for o in range(first, end) if o not in done_offsets])
