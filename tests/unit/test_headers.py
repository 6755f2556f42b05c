"""Stored headers round-trip byte for byte; a damaged stored form is an error, not a loss."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainer.processing.headers import decode_headers, encode_headers

HEADERS = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=32)), max_size=8)


@given(HEADERS)
def test_headers_round_trip_byte_exact(headers):
    stored = encode_headers(headers)
    assert decode_headers(stored) == headers
    assert decode_headers(json.loads(stored)) == headers  # as psycopg hands jsonb back


def test_repeated_keys_and_any_bytes_are_kept():
    headers = [("a", b"\x00\x01"), ("a", b"\xff")]
    assert json.loads(encode_headers(headers)) == [["a", "AAE="], ["a", "/w=="]]
    assert decode_headers(encode_headers(headers)) == headers


@pytest.mark.parametrize("bad", ['{"a": "b"}', '[["a"]]', '[["a", "not base64!"]]', "[[1, null]]"])
def test_a_damaged_stored_form_is_an_error(bad):
    with pytest.raises(ValueError, match="stored header"):
        decode_headers(bad)
