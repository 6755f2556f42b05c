"""Offset map encoding: round trips, size budgets, wire format and damage handling."""

import base64
import random

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from drainer.offset_map import (
    MAX_KAFKA_METADATA,
    PartitionProgress,
    advance,
    decode_offset_map,
    encode_offset_map,
)


def raw(text: str) -> bytes:
    """The bytes before base64: what the size budgets are about."""
    return base64.b64decode(text, validate=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _zstd(payload: bytes, content_size: bool = True, checksum: bool = True) -> bytes:
    """A zstd frame as the encoder writes it, or with a safeguard left out."""
    options = {"write_content_size": content_size, "write_checksum": checksum}
    return zstandard.ZstdCompressor(**options).compress(payload)


def leb128(value: int) -> bytes:
    """Independent reference varint, so a symmetric encoder/decoder bug cannot hide."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def reference_runs(committed: int, done: set[int]) -> bytes:
    """Reference run-length payload: the encoder must never produce anything larger."""
    runs, cursor = [], committed
    for offset in sorted(done):
        if runs and offset == cursor:
            runs[-1] += 1
        else:
            runs += [offset - cursor, 1]
        cursor = offset + 1
    return b"".join(leb128(run) for run in runs)


committeds = st.integers(0, 2**40)


@st.composite
def done_sets(draw: st.DrawFn, committed: int) -> set[int]:
    """Sparse, dense and run-shaped sets of offsets >= committed, with gaps up to 2**32."""
    kind = draw(st.sampled_from(["runs", "dense", "sparse"]))
    if kind == "dense":
        return {committed + o for o in draw(st.sets(st.integers(0, 3000), max_size=1500))}
    gaps = st.integers(0, 2**32) if kind == "sparse" else st.integers(0, 4) | st.integers(0, 2**32)
    pieces = draw(st.lists(st.tuples(gaps, st.integers(1, 300)), max_size=40))
    done, cursor = set(), committed
    for gap, length in pieces:
        cursor += gap
        done.update(range(cursor, cursor + length))
        cursor += length
    return done


@st.composite
def maps(draw: st.DrawFn) -> tuple[int, set[int]]:
    committed = draw(committeds)
    return committed, draw(done_sets(committed))


# --- round trips ---------------------------------------------------------------------------------


@given(maps())
def test_round_trip(case: tuple[int, set[int]]) -> None:
    committed, done = case
    text = encode_offset_map(committed, done)
    assert decode_offset_map(committed, text) == done
    assert (text == "") == (not done)
    if done:
        assert len(raw(text)) <= 1 + len(reference_runs(committed, done))


@given(maps())
def test_round_trip_after_advance(case: tuple[int, set[int]]) -> None:
    committed, done = advance(*case)
    assert decode_offset_map(committed, encode_offset_map(committed, done)) == done


@given(committeds, st.data())
def test_advance_properties(committed: int, data: st.DataObject) -> None:
    # Start runs at `committed` often, so advancing actually moves; sometimes add stale offsets.
    done = data.draw(done_sets(committed)) | data.draw(
        st.sets(st.integers(max(0, committed - 10), committed + 5), max_size=12)
    )
    new_committed, remaining = advance(committed, done)
    assert new_committed >= committed
    assert new_committed not in remaining
    assert all(offset > new_committed for offset in remaining)
    assert set(range(committed, new_committed)) | remaining == {o for o in done if o >= committed}
    assert advance(new_committed, remaining) == (new_committed, remaining)


def test_advance_moves_past_contiguous_done_offsets_only() -> None:
    assert advance(10, {3, 10, 11, 12, 14, 15}) == (13, {14, 15})
    assert advance(10, {11}) == (10, {11})
    assert advance(10, []) == (10, set())


def test_empty_map_is_empty_string() -> None:
    assert encode_offset_map(123, []) == ""
    assert decode_offset_map(123, "") == set()


def test_committed_offset_itself_may_be_done() -> None:
    text = encode_offset_map(7, {7, 8, 20})
    assert decode_offset_map(7, text) == {7, 8, 20}


def test_iterator_input_is_consumed_once() -> None:
    assert decode_offset_map(5, encode_offset_map(5, iter([9, 6, 9]))) == {6, 9}


# --- size budgets (hard requirements) ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_random_half_done_2000_offsets_fits_260_bytes(seed: int) -> None:
    rng = random.Random(seed)
    committed = rng.randrange(2**40)
    done = {committed + i for i in range(2000) if rng.random() < 0.5}
    text = encode_offset_map(committed, done)
    assert len(raw(text)) <= 260
    assert len(text) <= MAX_KAFKA_METADATA
    assert decode_offset_map(committed, text) == done


def test_one_gap_then_50000_done_fits_16_bytes() -> None:
    committed = 1_000_000_007
    done = set(range(committed + 1, committed + 50_001))
    text = encode_offset_map(committed, done)
    assert len(raw(text)) <= 16
    # Pin the wire format: tag 0x01, one not-done offset, then a run of 50,000.
    assert raw(text) == b"\x01" + leb128(1) + leb128(50_000)
    assert decode_offset_map(committed, text) == done


def test_regular_pattern_picks_a_compressed_format() -> None:
    done = set(range(0, 40_000, 3))
    data = raw(encode_offset_map(0, done))
    assert data[0] in (0x02, 0x04)
    assert len(data) < 100
    assert decode_offset_map(0, b64(data)) == done


# --- wire format (decoding hand-made payloads) ---------------------------------------------------


def test_decode_run_length_by_hand() -> None:
    # not-done 2, done 3, not-done 130 (two-byte varint), done 1
    assert decode_offset_map(100, b64(b"\x01\x02\x03\x82\x01\x01")) == {102, 103, 104, 235}


def test_decode_bitset_is_lsb_first() -> None:
    # byte 0 = 0b00000101 -> offsets +0, +2; byte 1 = 0b10000000 -> offset +15
    assert decode_offset_map(50, b64(b"\x03\x05\x80")) == {50, 52, 65}


def test_decode_zstd_variants_by_hand() -> None:
    assert decode_offset_map(50, b64(b"\x04" + _zstd(b"\x05\x80"))) == {50, 52, 65}
    assert decode_offset_map(50, b64(b"\x02" + _zstd(b"\x00\x02"))) == {50, 51}


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        ({1000}, b"\x03\x01"),  # bitset 1 byte beats run-length 2 bytes
        (set(range(1000, 1008)), b"\x03\xff"),
        ({1008}, b"\x01\x08\x01"),  # tie at 2 bytes: the lower tag (run-length) wins
        ({1016}, b"\x01\x10\x01"),
    ],
)
def test_smallest_encoding_wins_and_ties_go_to_the_lower_tag(
    done: set[int], expected: bytes
) -> None:
    assert raw(encode_offset_map(1000, done)) == expected


def test_dense_random_map_uses_a_bitset() -> None:
    rng = random.Random(1)
    assert raw(encode_offset_map(0, {i for i in range(2000) if rng.random() < 0.5}))[0] == 0x03


# --- damaged input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b64(b"\x07\x00\x01"), "unknown format tag 0x07"),
        (b64(b"\x00"), "unknown format tag 0x00"),
        (b64(b"\x01\x00\x81"), "truncated varint"),
        (b64(b"\x01\x00\x80\x00"), "not minimally encoded"),
        (b64(b"\x01" + b"\xff" * 9 + b"\x01"), "exceeds 63 bits"),
        (b64(b"\x01\x00\x01\x05"), "even number"),
        (b64(b"\x01"), "0 runs"),
        (b64(b"\x01\x00\x01\x00\x01"), "empty run"),
        (b64(b"\x01\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x01"), "beyond 2**63-1"),
        (b64(b"\x01\x00\x80\x80\x80\x80\x01"), "more than"),
        (b64(b"\x03\x05\x00"), "ends in a zero byte"),
        (b64(b"\x03"), "bitset payload is empty"),
        ("AQ*B", "not valid base64"),
        ("AQA", "not valid base64"),
        ("====", "not valid base64"),
        ("ü", "not valid base64"),
        (b64(b"\x02" + b"not a zstd frame"), "zstd payload is corrupt"),
        (b64(b"\x04" + _zstd(b"\x05")[:-2]), "zstd payload"),
        (b64(b"\x04" + _zstd(b"\x05") + b"junk"), "trailing garbage"),
        (b64(b"\x04" + _zstd(b"\x05", content_size=False)), "unknown or oversized"),
        (b64(b"\x04" + _zstd(b"\x05", checksum=False)), "has no checksum"),
    ],
)
def test_damaged_input_raises(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="offset map") as info:
        decode_offset_map(10, text)
    assert message in str(info.value)


def test_corrupted_zstd_payload_raises() -> None:
    # Flip each byte of the frame in turn; without the frame checksum some of these decoded
    # silently to a map thousands of offsets off.
    good = raw(encode_offset_map(0, set(range(0, 40_000, 3))))
    assert good[0] in (0x02, 0x04)
    for flip in range(1, len(good)):
        damaged = bytearray(good)
        damaged[flip] ^= 0xFF
        with pytest.raises(ValueError, match="offset map: zstd"):
            decode_offset_map(0, b64(bytes(damaged)))


def test_decompression_bomb_is_refused() -> None:
    bomb = _zstd(b"\x00" * (64 * 2**20) + b"\x01")
    assert len(bomb) < 10_000
    with pytest.raises(ValueError, match="oversized content size"):
        decode_offset_map(0, b64(b"\x04" + bomb))


# --- bad arguments -------------------------------------------------------------------------------


def test_offset_below_committed_raises() -> None:
    with pytest.raises(ValueError, match="below the committed offset 100"):
        encode_offset_map(100, {100, 99, 150})


def test_negative_committed_raises() -> None:
    with pytest.raises(ValueError, match="committed offset -1"):
        encode_offset_map(-1, [])
    with pytest.raises(ValueError, match="committed offset -1"):
        decode_offset_map(-1, "")


def test_negative_done_offset_raises() -> None:
    with pytest.raises(ValueError, match="below the committed offset 0"):
        encode_offset_map(0, {-5, 3})


def test_offset_beyond_int64_raises() -> None:
    with pytest.raises(ValueError, match="exceeds the Kafka maximum"):
        encode_offset_map(0, {2**63})


def test_advance_rejects_negative_committed() -> None:
    with pytest.raises(ValueError, match="committed offset -3"):
        advance(-3, {0})


# --- PartitionProgress: the one type for a partition's progress -------------------------------

progress_st = st.builds(
    lambda committed, rel: PartitionProgress(committed, frozenset(committed + 1 + r for r in rel)),
    st.integers(0, 2**40),
    st.sets(st.integers(0, 5000), max_size=200),
)


@given(progress_st)
def test_progress_round_trips_through_its_stored_form(progress):
    stored = PartitionProgress.from_stored(progress.committed, progress.encoded())
    assert stored == progress
    assert stored.encoded() == progress.encoded()


def test_progress_read_from_the_store_keeps_its_text():
    """A compare-and-set matches the stored text even if today's encoder would write another."""
    older = base64.b64encode(b"\x01\x02\x03").decode()  # run-length, never zstd: still valid
    progress = PartitionProgress.from_stored(100, older)
    assert progress.done == {102, 103, 104}
    assert progress.encoded() == older
    assert progress == PartitionProgress(100, frozenset({102, 103, 104}))


@given(
    progress_st,
    st.integers(0, 6000),
    st.sets(st.integers(0, 6000), max_size=30),
)
def test_progress_after_a_read_is_done_exactly_where_it_should_be(progress, length, failed):
    end = progress.committed + length
    not_done = {progress.committed + f for f in failed if f < length}
    not_done -= progress.done  # the read skips done offsets, so they cannot fail
    after = progress.after_read(end, not_done)
    for offset in range(progress.committed, end + 10):
        expected = (offset < end and offset not in not_done) or progress.is_done(offset)
        assert after.is_done(offset) == expected, offset
    assert after.committed not in after.done  # advanced: the committed offset is not done
    assert after == PartitionProgress.from_stored(after.committed, after.encoded())


@given(progress_st, st.integers(0, 6000))
def test_progress_pending_counts_what_is_not_done(progress, length):
    end = progress.committed + length
    pending = [o for o in range(progress.committed, end) if not progress.is_done(o)]
    assert progress.pending_below(end) == len(pending)
    assert progress.pending_below(progress.committed - 1) == 0
    first = progress.first_pending()
    assert not progress.is_done(first) and all(
        progress.is_done(o) for o in range(progress.committed, first)
    )
