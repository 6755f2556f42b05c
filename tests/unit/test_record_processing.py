"""Ordering, concurrency and held-back semantics of record mode, without Spark."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.processing.record_processing import process_in_chunks, process_records
from drainer.processing.records import Record


def _records(keys: list[str], poison: set[int] = frozenset()) -> list[Record]:
    return [
        Record("t-0", 0, offset, 0, key.encode(), b"poison" if offset in poison else b"ok")
        for offset, key in enumerate(keys)
    ]


class Recorder:
    """A handler that logs call order and fails on poison values."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[int] = []
        self.lock = threading.Lock()
        self.delay = delay
        self.active = 0
        self.peak = 0

    def __call__(self, record: Record) -> dict:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
            self.calls.append(record.offset)
        if record.value == b"poison":
            raise ValueError(f"bad {record.offset}")
        return {"offset": record.offset}


def test_partition_ordering_is_serial_and_holds_back_the_rest():
    handler = Recorder()
    outcomes = process_records(_records(["a", "b", "a", "c"], poison={1}), handler, "partition", 8)
    assert handler.calls == [0, 1]
    assert [o.ok for o in outcomes] == [True, False, False, False]
    assert [o.held_back for o in outcomes] == [False, False, True, True]
    assert "ValueError: bad 1" in outcomes[1].error


def test_key_ordering_holds_back_only_the_failing_key():
    handler = Recorder()
    keys = ["a", "b", "a", "b", "a", "c"]
    outcomes = process_records(_records(keys, poison={2}), handler, "key", 4)
    by_offset = {o.record.offset: o for o in outcomes}
    assert by_offset[2].error and not by_offset[2].held_back
    assert by_offset[4].held_back  # later record of key a waits
    assert all(by_offset[o].ok for o in (0, 1, 3, 5))  # other keys are not delayed
    assert 4 not in handler.calls


def test_unordered_holds_nothing_back():
    outcomes = process_records(_records(["a"] * 5, poison={1}), Recorder(), "unordered", 4)
    assert [o.ok for o in outcomes] == [True, False, True, True, True]
    assert not any(o.held_back for o in outcomes)


def test_concurrency_is_bounded():
    handler = Recorder(delay=0.002)
    process_records(_records([str(i) for i in range(60)]), handler, "unordered", 5)
    assert handler.peak <= 5
    assert handler.peak >= 2  # and really concurrent


def test_out_of_order_input_is_rejected():
    records = _records(["a", "b"])
    with pytest.raises(ValueError, match="increasing offset order"):
        process_records(list(reversed(records)), Recorder(), "key", 2)


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.sampled_from("abcde"), min_size=1, max_size=40),
    poison=st.sets(st.integers(0, 39), max_size=5),
    concurrency=st.integers(1, 8),
)
def test_key_order_is_offset_order_per_key(keys, poison, concurrency):
    handler = Recorder()
    outcomes = process_records(_records(keys, poison), handler, "key", concurrency)
    for key in set(keys):
        seen = [o for o in handler.calls if keys[o] == key]
        assert seen == sorted(seen)
        offsets = [i for i, k in enumerate(keys) if k == key]
        first_bad = next((i for i in offsets if i in poison), None)
        for i in offsets:
            o = outcomes[i]
            if first_bad is None or i < first_bad:
                assert o.ok
            elif i == first_bad:
                assert not o.ok and not o.held_back
            else:
                assert o.held_back and i not in handler.calls


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.sampled_from("abcde"), min_size=1, max_size=40),
    poison=st.sets(st.integers(0, 39), max_size=5),
    ordering=st.sampled_from(["partition", "key", "unordered"]),
    concurrency=st.integers(1, 8),
    chunk=st.integers(1, 12),
)
def test_chunks_have_the_outcomes_of_one_call(keys, poison, ordering, concurrency, chunk):
    """Staging chunk by chunk changes nothing: a failure holds back across chunk boundaries."""

    def summary(outcomes):
        return [(o.record.offset, o.ok, o.held_back, o.error is not None) for o in outcomes]

    whole = process_records(_records(keys, poison), Recorder(), ordering, concurrency)
    chunks = list(
        process_in_chunks(_records(keys, poison), Recorder(), ordering, concurrency, chunk)
    )
    assert all(0 < len(c) <= chunk for c in chunks)
    assert summary([o for c in chunks for o in c]) == summary(whole)


def test_chunks_are_yielded_before_the_input_ends():
    """Bounded memory: a chunk's outcomes leave before later records are even read."""
    read: list[int] = []

    def stream():
        for record in _records(["a"] * 10):
            read.append(record.offset)
            yield record

    chunks = process_in_chunks(stream(), Recorder(), "partition", 1, chunk_records=3)
    first = next(chunks)
    assert [o.record.offset for o in first] == [0, 1, 2]
    assert read == [0, 1, 2]
    assert sum(len(c) for c in chunks) == 7
