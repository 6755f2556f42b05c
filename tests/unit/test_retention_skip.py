"""Retention below a committed offset: where the drain resumes, what it counts as lost."""

from hypothesis import given
from hypothesis import strategies as st

from drainer.lifecycle.planning import skip_deleted
from drainer.offset_map import PartitionProgress, encode_offset_map


def test_done_offsets_at_or_above_the_low_watermark_are_kept():
    stored = PartitionProgress.from_stored(35, encode_offset_map(35, set(range(36, 60)) | {70}))
    loss = skip_deleted("t-0", 0, 0, stored, low=45)
    assert (loss.first, loss.end, loss.records) == (35, 45, 1)  # only 35 was not done
    assert loss.moved_to == PartitionProgress(60, frozenset({70}))
    assert loss.moved_from == stored
    # what the commit's compare-and-set expects is exactly the stored text
    assert loss.moved_from.encoded() == stored.encoded()


@given(
    committed=st.integers(0, 500),
    done=st.sets(st.integers(1, 300), max_size=60),
    gap=st.integers(1, 400),
)
def test_nothing_done_is_lost_or_replayed(committed, done, gap):
    done = {committed + d for d in done}
    low = committed + gap
    loss = skip_deleted("t-0", 0, 0, PartitionProgress(committed, frozenset(done)), low)
    moved = PartitionProgress.from_stored(loss.moved_to.committed, loss.moved_to.encoded())
    # done from low on: exactly the done offsets that retention left, none more, none fewer
    after = set(range(low, moved.committed)) | moved.done
    assert after == {o for o in done if o >= low}
    assert moved.committed >= low
    assert loss.records == gap - len({o for o in done if o < low})
