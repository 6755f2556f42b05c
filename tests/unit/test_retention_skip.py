"""Retention below a committed offset: where the drain resumes, what it counts as lost."""

from hypothesis import given
from hypothesis import strategies as st

from drainer.lifecycle.planning import skip_deleted
from drainer.offset_map import decode_offset_map, encode_offset_map


def test_done_offsets_at_or_above_the_low_watermark_are_kept():
    stored = (35, encode_offset_map(35, set(range(36, 60)) | {70}))
    loss = skip_deleted("t-0", 0, 0, stored, low=45)
    assert (loss.first, loss.end, loss.records) == (35, 45, 1)  # only 35 was not done
    committed, offset_map = loss.moved_to
    assert committed == 60 and decode_offset_map(60, offset_map) == {70}
    assert loss.moved_from == stored


@given(
    committed=st.integers(0, 500),
    done=st.sets(st.integers(1, 300), max_size=60),
    gap=st.integers(1, 400),
)
def test_nothing_done_is_lost_or_replayed(committed, done, gap):
    done = {committed + d for d in done}
    low = committed + gap
    loss = skip_deleted("t-0", 0, 0, (committed, encode_offset_map(committed, done)), low)
    new_committed, new_map = loss.moved_to
    # done from low on: exactly the done offsets that retention left, none more, none fewer
    after = set(range(low, new_committed)) | decode_offset_map(new_committed, new_map)
    assert after == {o for o in done if o >= low}
    assert new_committed >= low
    assert loss.records == gap - len({o for o in done if o < low})
