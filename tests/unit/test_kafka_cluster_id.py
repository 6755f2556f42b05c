"""The local broker's cluster id: Kafka's Uuid form, never starting with a dash, which the
storage tool's argument parser would read as a flag (1 random id in 64 starts with one)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from drainer.services.kafka_config import KafkaPaths, cluster_id


def test_an_id_that_would_start_with_a_dash_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    paths = KafkaPaths(tmp_path / "kafka")
    made = cluster_id(paths)
    assert made == "AQEBAQEBAQEBAQEBAQEBAQ" and not made.startswith("-")
    assert cluster_id(paths) == made  # kept: a restart never re-formats
