"""Offset maps: which offsets above a partition's committed offset are already done (docs/design.md, "Offset map").

Records complete out of order, so the committed offset alone would replay every finished record
above the first unfinished one. The map records those finished offsets compactly enough for
Postgres and for Kafka's commit metadata (``MAX_KAFKA_METADATA`` characters).

Wire format: base64 (standard alphabet) of one format-tag byte followed by a payload. Offsets are
stored relative to the committed offset, which is *not* part of the text: the caller stores it
next to the map anyway, and a map is only meaningful together with it.

======  ===================  ==============================================================
tag     name                 payload
======  ===================  ==============================================================
0x01    run-length           unsigned LEB128 varints: alternating run lengths, first a run
                             of not-done offsets starting at ``committed`` (may be 0), then
                             done, not-done, ... ending with a done run. Every run but the
                             first is at least 1, so each map has exactly one encoding.
0x02    run-length+zstd      one zstd frame (content size and checksum) of a 0x01 payload
0x03    bitset               bit ``i`` is offset ``committed + i``; bit ``i`` lives in byte
                             ``i // 8`` at ``1 << (i % 8)`` (LSB-first). It ends with the
                             byte holding the highest done offset, so the last byte is non-zero.
0x04    bitset+zstd          one zstd frame (content size and checksum) of a 0x03 payload
======  ===================  ==============================================================

The empty map is the empty string (no tag), so an idle partition costs nothing. The encoder
builds the candidates and keeps the smallest (ties: the lower tag). Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import zstandard

from drainer.errors import OffsetMapError

__all__ = [
    "MAX_KAFKA_METADATA",
    "PartitionProgress",
    "advance",
    "decode_offset_map",
    "encode_offset_map",
]

MAX_KAFKA_METADATA = 4096
"""Kafka's default limit (``offset.metadata.max.bytes``) for commit metadata, in characters."""

MAX_OFFSET = 2**63 - 1
"""Kafka offsets are signed 64-bit; anything above is damage, not data."""

MAX_DECODED_BYTES = 64 * 2**20
"""Largest payload a zstd frame may expand to; refuses decompression bombs."""

MAX_DONE_OFFSETS = 2**24
"""Most done offsets one map may hold (a Python set this large is ~1 GB).

Without it a damaged varint could ask the decoder for 2**60 offsets. The encoder enforces the
same bound, so anything it writes is guaranteed to decode.
"""

_RUN_LENGTH, _RUN_LENGTH_ZSTD, _BITSET, _BITSET_ZSTD = 0x01, 0x02, 0x03, 0x04
_NAMES = {
    _RUN_LENGTH: "run-length",
    _RUN_LENGTH_ZSTD: "run-length+zstd",
    _BITSET: "bitset",
    _BITSET_ZSTD: "bitset+zstd",
}
_BITSET_MAX_RATIO = 8
"""Build bitsets only up to this many times the run-length size.

A sparse map (one done offset 2**32 above ``committed``) would otherwise cost 512 MiB of zero
bits. Past this ratio runs average over 64 offsets, where run-length is the natural form; the
cap trades a possibly smaller bitset+zstd for encoding time linear in the number of runs.
"""
_ZSTD_LEVEL = 19
_BIT_POSITIONS = tuple(tuple(i for i in range(8) if byte >> i & 1) for byte in range(256))


def _err(what: str) -> OffsetMapError:
    return OffsetMapError(f"offset map: {what}")


# --- varints -------------------------------------------------------------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _read_varints(data: bytes) -> list[int]:
    """Parse a whole buffer of LEB128 varints, strictly: damage must not look like a valid map."""
    values: list[int] = []
    value = shift = 0
    for pos, byte in enumerate(data):
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift >= 63:
                raise _err(f"varint at byte {pos} exceeds 63 bits; the payload is damaged")
            continue
        if byte == 0 and shift:
            raise _err(f"varint ending at byte {pos} is not minimally encoded; damaged payload")
        values.append(value)
        value = shift = 0
    if shift:
        raise _err("truncated varint at the end of the run-length payload")
    return values


# --- raw formats (on sorted offsets relative to `committed`) ------------------------------------


def _encode_runs(rel: list[int]) -> bytes:
    out = bytearray()
    start = prev = rel[0]
    _put_varint(out, start)  # leading not-done run, 0 if `committed` itself is done
    for offset in rel[1:]:
        if offset != prev + 1:
            _put_varint(out, prev + 1 - start)  # done run
            _put_varint(out, offset - prev - 1)  # not-done run
            start = offset
        prev = offset
    _put_varint(out, prev + 1 - start)
    return bytes(out)


def _decode_runs(base: int, payload: bytes) -> set[int]:
    runs = _read_varints(payload)
    if not runs or len(runs) % 2:
        raise _err(
            f"run-length payload has {len(runs)} runs; it needs an even number (it must end "
            "with a done run), so it is truncated or has trailing garbage"
        )
    if 0 in runs[1:]:
        raise _err("run-length payload has an empty run after the first; the payload is damaged")
    if sum(runs[1::2]) > MAX_DONE_OFFSETS:
        raise _err(f"run-length payload claims more than {MAX_DONE_OFFSETS} done offsets")
    done: set[int] = set()
    offset = base
    for skip, length in zip(runs[::2], runs[1::2], strict=True):
        offset += skip
        done.update(range(offset, offset + length))
        offset += length
    return done


def _encode_bits(rel: list[int]) -> bytes:
    bits = bytearray(rel[-1] // 8 + 1)
    for offset in rel:
        bits[offset >> 3] |= 1 << (offset & 7)
    return bytes(bits)


def _decode_bits(base: int, payload: bytes) -> set[int]:
    if not payload or payload[-1] == 0:
        raise _err(
            "bitset payload is empty or ends in a zero byte; it must end with the byte "
            "holding the highest done offset, so it is damaged"
        )
    if int.from_bytes(payload, "little").bit_count() > MAX_DONE_OFFSETS:
        raise _err(f"bitset payload claims more than {MAX_DONE_OFFSETS} done offsets")
    return {
        base + 8 * index + bit
        for index, byte in enumerate(payload)
        if byte
        for bit in _BIT_POSITIONS[byte]
    }


# --- zstd wrapper --------------------------------------------------------------------------------


def _compress(raw: bytes) -> bytes:
    """One zstd frame with its content size (to bound decoding) and checksum.

    The checksum costs 4 bytes but matters: without it a single flipped byte in a compressed
    map can silently decode to a different, structurally valid map thousands of offsets off.
    """
    compressor = zstandard.ZstdCompressor(
        level=_ZSTD_LEVEL, write_content_size=True, write_checksum=True
    )
    return compressor.compress(raw)


def _decompress(payload: bytes) -> bytes:
    """Decompress exactly one checksummed frame whose declared size is known and bounded."""
    try:
        frame = zstandard.get_frame_parameters(payload)
        size = frame.content_size
        if not 0 <= size <= MAX_DECODED_BYTES:  # "unknown" is -1 or 2**64-1
            raise _err(
                f"zstd frame declares an unknown or oversized content size; the limit is "
                f"{MAX_DECODED_BYTES} bytes"
            )
        if not frame.has_checksum:
            raise _err("zstd frame has no checksum; this drainer always writes one, so damaged")
        stream = zstandard.ZstdDecompressor().decompressobj()
        raw = stream.decompress(payload)
    except zstandard.ZstdError as exc:
        raise _err(f"zstd payload is corrupt: {exc}") from exc
    if not stream.eof or stream.unused_data or len(raw) != size:
        raise _err("zstd payload is truncated or followed by trailing garbage")
    return raw


_Decoder = Callable[[int, bytes], set[int]]


def _zstd(decode: _Decoder) -> _Decoder:
    return lambda base, payload: decode(base, _decompress(payload))


_DECODERS: dict[int, _Decoder] = {
    _RUN_LENGTH: _decode_runs,
    _RUN_LENGTH_ZSTD: _zstd(_decode_runs),
    _BITSET: _decode_bits,
    _BITSET_ZSTD: _zstd(_decode_bits),
}


# --- public API ----------------------------------------------------------------------------------


def _check_committed(committed: int) -> None:
    if not 0 <= committed <= MAX_OFFSET:
        raise _err(f"committed offset {committed} is outside 0..2**63-1")


def encode_offset_map(committed: int, done: Iterable[int]) -> str:
    """Encode the done offsets (all >= ``committed``) as base64 text; the empty set is ``""``.

    ``committed`` itself may be in ``done`` (normally :func:`advance` has moved past it, but
    accepting it costs nothing). Raises ValueError for offsets below ``committed`` or above
    2**63-1, and for more than ``MAX_DONE_OFFSETS`` offsets (they could not be decoded).
    """
    _check_committed(committed)
    rel = sorted({offset - committed for offset in done})
    if not rel:
        return ""
    if rel[0] < 0:
        raise _err(f"done offset {rel[0] + committed} is below the committed offset {committed}")
    if rel[-1] + committed > MAX_OFFSET:
        raise _err(f"done offset {rel[-1] + committed} exceeds the Kafka maximum 2**63-1")
    if len(rel) > MAX_DONE_OFFSETS:
        raise _err(f"{len(rel)} done offsets exceed the limit of {MAX_DONE_OFFSETS}; advance first")

    runs = _encode_runs(rel)
    raws = {_RUN_LENGTH: runs}
    if rel[-1] // 8 + 1 <= _BITSET_MAX_RATIO * len(runs):
        raws[_BITSET] = _encode_bits(rel)
    candidates = dict(raws)
    for tag, raw in raws.items():
        if len(raw) <= MAX_DECODED_BYTES:  # larger would be refused by the decoder
            candidates[tag + 1] = _compress(raw)
    tag, payload = min(sorted(candidates.items()), key=lambda item: len(item[1]))
    return base64.b64encode(bytes([tag]) + payload).decode("ascii")


def decode_offset_map(committed: int, text: str) -> set[int]:
    """Inverse of :func:`encode_offset_map`; ``""`` is the empty set.

    Damage never decodes to an empty (or any) map silently: an unknown tag, bad base64, a
    truncated or padded payload or corrupt zstd all raise ValueError saying what is wrong,
    because a wrong map would replay or skip records.
    """
    _check_committed(committed)
    if text == "":
        return set()
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _err(f"not valid base64 ({exc}); the stored map is damaged") from exc
    if not data:
        raise _err("base64 text decodes to no bytes; the stored map is damaged")
    tag, payload = data[0], data[1:]
    decode = _DECODERS.get(tag)
    if decode is None:
        known = ", ".join(f"0x{t:02x} {name}" for t, name in _NAMES.items())
        raise _err(
            f"unknown format tag 0x{tag:02x} (known: {known}); the stored map is damaged or "
            "from a newer drainer"
        )
    done = decode(committed, payload)
    if max(done) > MAX_OFFSET:
        raise _err(f"{_NAMES[tag]} payload reaches offset {max(done)}, beyond 2**63-1; damaged")
    return done


def advance(committed: int, done: Iterable[int]) -> tuple[int, set[int]]:
    """Move ``committed`` past every done offset contiguous with it.

    Returns the new committed offset (the first offset not done) and the done offsets above it;
    offsets below the original ``committed`` are already covered by it and are dropped.
    """
    _check_committed(committed)
    remaining = {offset for offset in done if offset >= committed}
    while committed in remaining:
        remaining.remove(committed)
        committed += 1
    return committed, remaining


@dataclass(frozen=True)
class PartitionProgress:
    """A partition's progress: every offset below `committed` is done, and so is each of `done`.

    The one type for it, and the one place a stored map is decoded (`from_stored`) and encoded
    (`encoded`). A progress read from the store keeps the text it was read from, so that a
    compare-and-set against the stored row matches byte for byte, whichever encoder wrote it.
    """

    committed: int
    done: frozenset[int] = frozenset()
    _text: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_stored(cls, committed: int, text: str) -> PartitionProgress:
        """Decode a stored (committed offset, offset map); damage raises OffsetMapError."""
        return cls(committed, frozenset(decode_offset_map(committed, text)), text)

    def encoded(self) -> str:
        """The offset map's text, as stored next to `committed` (encoded once, then kept)."""
        if self._text is None:
            # a cache, not state: `_text` takes no part in equality
            object.__setattr__(self, "_text", encode_offset_map(self.committed, self.done))
        assert self._text is not None
        return self._text

    def is_done(self, offset: int) -> bool:
        return offset < self.committed or offset in self.done

    def first_pending(self) -> int:
        """The first offset not done: where a consumer would resume."""
        return advance(self.committed, self.done)[0]

    def done_below(self, end: int) -> frozenset[int]:
        """The done offsets of the map that lie below `end` (the ones a read up to `end` skips)."""
        return frozenset(o for o in self.done if o < end)

    def pending_below(self, end: int) -> int:
        """How many offsets in [committed, end) are not done yet (0 when `end` <= committed)."""
        return max(0, end - self.committed - len(self.done_below(end)))

    def skipped_to(self, low: int) -> PartitionProgress:
        """Offsets below `low` count as done (retention deleted them); the map keeps the rest."""
        committed, rest = advance(low, {o for o in self.done if o >= low})
        return PartitionProgress(committed, frozenset(rest))

    def after_read(self, end: int, not_done: Iterable[int] = ()) -> PartitionProgress:
        """The progress once a run read [committed, end) and finished all of it but `not_done`.

        Offsets of the map stay done; the committed offset moves to the first offset not done.
        """
        not_done = set(not_done)
        if not not_done:
            committed, rest = advance(end, {o for o in self.done if o >= end})
            return PartitionProgress(committed, frozenset(rest))
        first = min(not_done)
        done = {o for o in range(first + 1, end) if o not in not_done}
        done |= {o for o in self.done if o > first}
        committed, rest = advance(first, done)
        return PartitionProgress(committed, frozenset(rest))
