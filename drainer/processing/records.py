"""Records as handlers see them: bytes in, headers as an ordered list (docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Record:
    """One Kafka record: bytes in, so a handler decides how to decode (and may fail doing it)."""

    topic: str
    partition: int
    offset: int
    level: int
    key: bytes | None
    value: bytes | None
    timestamp: datetime | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
