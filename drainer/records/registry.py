"""Writer schemas from a Confluent-compatible schema registry, and the wire format's framing.

One client per registry URL per process: confluent-kafka caches each schema it fetched by id, so
a run asks the registry once per writer schema, and its in-process test registry (`mock://`)
lives in the client object itself, so the producer of a test and the drain must share it.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

from drainer.config.formats import RegistryConfig
from drainer.config.kafka_clients import expanded
from drainer.errors import ConfigError

MAGIC = 0
HEADER_BYTES = 5  # magic byte, then the schema id as a big-endian int32

_clients: dict[str, Any] = {}
_lock = threading.Lock()


def registry_client(config: RegistryConfig) -> Any:
    """The process's `SchemaRegistryClient` for the registry `config` names."""
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as err:  # the extra pulls in authlib and friends
        raise ConfigError(
            f"a schema registry needs confluent-kafka's registry client ({err}): "
            "pip install 'confluent-kafka[schemaregistry,avro]'"
        ) from None
    with _lock:
        client = _clients.get(config.url)
        if client is None:
            conf = {"url": config.url}
            if config.basic_auth_user_info:
                conf["basic.auth.user.info"] = config.basic_auth_user_info
            if config.ssl_ca_location:
                conf["ssl.ca.location"] = config.ssl_ca_location
            client = SchemaRegistryClient.new_client(expanded("value.registry", conf))
            _clients[config.url] = client
        return client


def writer_schemas(config: RegistryConfig, ids: list[int]) -> dict[int, str | None]:
    """Each schema id's Avro schema text, None for an id the registry does not know."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = registry_client(config)
    found: dict[int, str | None] = {}
    for schema_id in ids:
        try:
            schema = client.get_schema(schema_id)
        except SchemaRegistryError:
            found[schema_id] = None
            continue
        if schema.schema_type not in (None, "AVRO"):
            found[schema_id] = None  # a JSON or Protobuf schema: not an Avro writer schema
            continue
        found[schema_id] = schema.schema_str
    return found


def register(config: RegistryConfig, subject: str, schema_text: str) -> int:
    """Register an Avro schema under `subject` (`drainer produce`, tests); returns its id."""
    from confluent_kafka.schema_registry import Schema

    return int(registry_client(config).register_schema(subject, Schema(schema_text, "AVRO")))


def frame(schema_id: int, payload: bytes) -> bytes:
    """A payload in the wire format: magic byte, schema id, the Avro binary body."""
    return struct.pack(">bI", MAGIC, schema_id) + payload
