"""Records as handlers see them (DESIGN §7), and the loading of user code by import path."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from drainer.config import ConfigError


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


def load_callable(path: str, setting: str) -> Callable[..., Any]:
    """Resolve 'package.module:function'; a bad path names the setting that holds it."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{setting} '{path}': cannot import {module_name} ({err})") from None
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{setting} '{path}': {module_name} has no attribute {attr}") from None
    if not callable(target):
        raise ConfigError(f"{setting} '{path}' is not callable")
    return target
