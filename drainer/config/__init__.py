"""Configuration: the drains file and the Kafka client settings it carries.

`drains` validates the YAML file of drains (every field documented where it is declared),
`sinks` its sink block and `units` its durations and sizes;
`kafka_clients` turns the one common Kafka block into librdkafka and Java client settings and
keeps their secrets out of logs. All are pure: they read files and the environment (through
`drainer.settings`), never a service.
"""

from drainer.config.drains import DrainConfig, DrainsFile, get_drain, load_drains
from drainer.config.sinks import SinkConfig
from drainer.errors import ConfigError

__all__ = ["ConfigError", "DrainConfig", "DrainsFile", "SinkConfig", "get_drain", "load_drains"]
