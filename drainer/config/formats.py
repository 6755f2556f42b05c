"""Declared record formats (docs/configuration.md#record-formats): how a drain's values and keys
decode into typed columns, and what happens to a record that does not decode.

Only what the drains file says is checked here (a schema file exists, a format has the pieces it
needs); reading schema files and asking a registry happen when a run decodes (spark_jobs.decode).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from drainer.config.keys import KnownKeys

Format = Literal["json", "avro", "protobuf", "string", "bytes"]

# the columns a drain without a processor writes besides the value's fields: reserved names
METADATA_COLUMNS = (
    "_topic",
    "_partition",
    "_offset",
    "_timestamp",
    "_level",
    "_key",
    "_headers",
)
# the metadata columns every decoded row carries, written or not (`metadata_columns`): a
# record's coordinates, which name it in errors and dead letters and break an upsert's ties
COORDINATES = ("_topic", "_partition", "_offset")

# the jars Spark needs to decode a format, resolved (drainer.spark.jars) only when a drain
# declares it; spark-avro 4.1.1 is the newest on Maven Central for Spark 4.1 (no 4.1.3)
DECODER_JARS: dict[str, tuple[str, ...]] = {
    "avro": ("org.apache.spark:spark-avro_2.13:4.1.1",),
}


class RegistryConfig(KnownKeys):
    """A Confluent-compatible schema registry: values in its wire format (magic byte 0, a
    4-byte schema id, the payload), each writer schema fetched once per run by id."""

    model_config = ConfigDict(extra="forbid")
    WHERE: ClassVar[str] = "registry"

    url: str = Field(
        description="the registry's URL, e.g. `https://registry:8081` (Confluent Schema "
        "Registry, or one speaking its REST API); `mock://name` is confluent-kafka's in-process "
        "test registry"
    )
    basic_auth_user_info: str | None = Field(
        default=None,
        repr=False,
        description="`user:password` for HTTP basic auth, as `${NAME}` read from the "
        "environment when the run starts (never printed)",
    )
    ssl_ca_location: str | None = Field(
        default=None, description="PEM file of the CA that signed the registry's certificate"
    )


class RecordFormat(KnownKeys):
    """How a value (or key) decodes: its format and, where the format needs one, its schema."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    WHERE: ClassVar[str] = "the format"

    format: Format = Field(
        description="`json`, `avro`, `protobuf`, `string` (UTF-8 text) or `bytes` (as read)"
    )
    schema_: str | None = Field(
        default=None,
        alias="schema",
        description="json: a Spark DDL string (`id string, amount double`) or a JSON Schema "
        "file (`*.json`); avro: an `.avsc` file; protobuf: a `FileDescriptorSet` file "
        "(`protoc --include_imports --descriptor_set_out=FILE.desc`); relative paths are "
        "relative to the drains file",
    )
    registry: RegistryConfig | None = Field(
        default=None,
        description="avro, protobuf: the values are in the Confluent wire format; each "
        "record's writer schema comes from this registry (see `value.registry.*`)",
    )
    envelope: Literal["debezium"] | None = Field(
        default=None,
        description="json, avro: `debezium` unwraps Debezium change events (JSON: with or "
        "without the JSON converter's `schema`/`payload` wrapper, `schema` declaring the source "
        "table's row; Avro: the envelope record its Avro converter writes): the output is "
        "`after` (`before` for a delete) plus `_op`, `_source_ts_ms`, `_source_lsn`. A JSON "
        "key with it unwraps `payload` only; an Avro key is its record. docs/state-tables.md",
    )
    message: str | None = Field(
        default=None,
        description="protobuf: the message's full name, package included (`shop.Order`); "
        "with a registry, a record whose message indexes name another message is a bad record",
    )

    @model_validator(mode="after")
    def _complete(self) -> RecordFormat:
        if self.format == "protobuf" and not (self.message and (self.schema_ or self.registry)):
            raise ValueError(
                "format 'protobuf' needs `message: pkg.Name` and `schema: FILE.desc` (a "
                "FileDescriptorSet from `protoc --include_imports --descriptor_set_out`), or "
                "`registry: {url: ...}` for the Confluent wire format"
            )
        if self.message and self.format != "protobuf":
            raise ValueError(f"`message` is for format 'protobuf', not '{self.format}'")
        if self.format == "json" and not self.schema_:
            raise ValueError(
                "format 'json' needs `schema`: a Spark DDL string such as "
                "'id string, amount double', or a JSON Schema file"
            )
        if self.format == "avro" and not (self.schema_ or self.registry):
            raise ValueError(
                "format 'avro' needs `schema: file.avsc`, or `registry: {url: ...}` for the "
                "Confluent wire format"
            )
        if self.format in ("string", "bytes") and (self.schema_ or self.registry):
            raise ValueError(f"format '{self.format}' takes no `schema` or `registry`")
        if self.envelope is not None and self.format not in ("json", "avro"):
            raise ValueError("`envelope: debezium` is for format 'json' or 'avro'")
        if self.format == "json" and self.registry:
            raise ValueError("a registry is for format 'avro' only (JSON takes a `schema`)")
        return self

    def schema_path(self, base: Path) -> Path | None:
        """The schema as a file (json's JSON Schema, avro's .avsc, protobuf's descriptor set),
        relative to `base`."""
        if self.schema_ is None or (
            self.format == "json" and not self.schema_.strip().endswith(".json")
        ):
            return None
        path = Path(self.schema_).expanduser()
        return path if path.is_absolute() else base / path


def check_schema_files(fmt: RecordFormat, base: Path) -> None:
    """A schema file the drains file names exists (said at load time, not mid-run)."""
    path = fmt.schema_path(base)
    if path is not None and not path.is_file():
        raise ValueError(f"schema file {path} not found: give a path relative to the drains file")
