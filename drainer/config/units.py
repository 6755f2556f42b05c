"""Durations (`90s`, `15m`, `1h`, `2d`) and sizes (`100KB`, `512MiB`) as the drains file writes
them: one parser each, so every setting that takes one reads it the same way."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {
    "b": 1,
    **{f"{p}b": 1000 ** (i + 1) for i, p in enumerate("kmgt")},
    **{f"{p}ib": 1024 ** (i + 1) for i, p in enumerate("kmgt")},
}


def duration_ms(value: object) -> int:
    """`90s`, `15m`, `1h`, `2d` or a number of seconds, in ms; ValueError says what is allowed."""
    plain = isinstance(value, str | int | float) and not isinstance(value, bool)
    match = _DURATION.match(str(value)) if plain else None
    if match is None or (ms := round(float(match[1]) * _UNIT_S[match[2] or "s"] * 1000)) <= 0:
        raise ValueError(
            f"{value!r} is not a duration > 0: write a number with a unit, e.g. 90s, 15m, 1h "
            "or 2d (a bare number is seconds)"
        )
    return ms


def size_bytes(value: object) -> int:
    """`100KB`, `512MiB`, `1GB` or a number of bytes, as bytes; ValueError says what is allowed.

    KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB powers of 1024 (as Kafka's tools count).
    """
    plain = isinstance(value, str | int | float) and not isinstance(value, bool)
    match = _SIZE.match(str(value)) if plain else None
    unit = (match[2] or "b").lower() if match else "b"
    if match is None or (size := int(float(match[1]) * _UNIT_BYTES[unit])) <= 0:
        raise ValueError(
            f"{value!r} is not a size > 0: write a number with a unit, e.g. 100KB, 512MiB or "
            "1GB (KB = 1000 bytes, KiB = 1024; a bare number is bytes)"
        )
    return size
