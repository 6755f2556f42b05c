"""Kafka record headers as stored in Postgres: an ordered JSON list of [key, base64 value].

Kafka headers are an ordered list of (key, bytes) pairs: a key may repeat and a value may be any
bytes (0x00, non-UTF-8) or null. A JSON object of decoded strings loses all three, so failures
and dead letters store `[["a", "AAE="], ["a", "/w=="], ["n", null]]` (migration 009 converted
the old objects) and a retry hands them to the handler byte for byte.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

Headers = list[tuple[str, bytes | None]]


def encode_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> str:
    """The stored (JSON text) form of a header list; order and repeated keys kept."""
    return json.dumps(
        [
            [key, None if value is None else base64.b64encode(bytes(value)).decode("ascii")]
            for key, value in headers or ()
        ]
    )


def decode_headers(stored: Any) -> Headers:
    """Headers from their stored form (JSON text or the list psycopg hands back).

    Anything but a list of [key, base64-or-null] pairs is a clear error, never a silent loss.
    """
    data = json.loads(stored) if isinstance(stored, str | bytes) else stored
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError(f"stored headers must be a list of [key, base64 value] pairs: {data!r}")
    headers: Headers = []
    for pair in data:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"stored header {pair!r} is not a [key, base64 value] pair")
        key, value = pair
        try:
            headers.append((key, None if value is None else base64.b64decode(value, validate=True)))
        except (binascii.Error, TypeError) as err:
            raise ValueError(f"stored header {key!r} has a damaged value: {err}") from None
    return headers
