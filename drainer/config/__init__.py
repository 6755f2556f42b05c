"""Configuration: the drains file and the Kafka client settings it carries.

`drains` validates the YAML file of drains (every field documented where it is declared),
`sink_models` its sink block and `units` its durations and sizes;
`kafka_clients` turns the one common Kafka block into librdkafka and Java client settings and
keeps their secrets out of logs. All are pure: they read files and the environment (through
`drainer.settings`), never a service.

The models (pydantic, YAML) are imported on first use of a name below, so a command that only
needs `kafka_clients.redact` or `units` (`drainer --help`, the parser) does not build them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drainer.errors import ConfigError

if TYPE_CHECKING:
    from drainer.config.drains import DrainConfig, DrainsFile, get_drain, load_drains
    from drainer.config.sink_models import SinkConfig

__all__ = ["ConfigError", "DrainConfig", "DrainsFile", "SinkConfig", "get_drain", "load_drains"]
_FROM = {
    "DrainConfig": "drains",
    "DrainsFile": "drains",
    "get_drain": "drains",
    "load_drains": "drains",
    "SinkConfig": "sink_models",
}


def __getattr__(name: str) -> Any:
    if name in _FROM:
        from importlib import import_module

        return getattr(import_module(f"drainer.config.{_FROM[name]}"), name)
    raise AttributeError(f"module 'drainer.config' has no attribute {name!r}")
