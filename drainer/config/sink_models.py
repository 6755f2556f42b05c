"""Where a drain's output goes: one configuration model per sink type, each checking only its
own keys, joined as a pydantic union tagged by `type` (`postgres` when omitted).

What a sink does in a run lives in `drainer/sinks/` (driver side) and `spark_jobs/sinks/`
(Spark side); this module only says what a drains file may write under `sink:`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from drainer.config.keys import unknown_keys
from drainer.config.route_models import _Routed
from drainer.config.units import duration_ms
from drainer.store.sink_names import check_table_name

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ICEBERG_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# Kafka's own rule for topic names (at most 249 of these characters)
_KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
DEFAULT_SINK_TYPE = "postgres"
UPSERT_KEYS = ("write", "primary_key", "order_by", "delete_when", "delete_retention")
# an upsert's defaults (drainer.sinks.upsert resolves them): the record key, then the record's
# own order, ties broken by level, partition and offset
DEFAULT_KEY = ("_key",)
DEFAULT_ORDER = ("_timestamp", "_level", "_partition", "_offset")
TIE_BREAKERS = ("_level", "_partition", "_offset")


def top_column(path: str) -> str:
    """`_key.id` -> `_key`: the output column a key or order path reads."""
    return path.split(".", 1)[0]


class CatalogConfig(BaseModel):
    """An Iceberg catalog of your own (production: a REST catalog), instead of the embedded one.

    Every key besides `name` becomes the Spark setting `spark.sql.catalog.<name>.<key>`, so any
    catalog property passes through; values may reference environment variables as `${NAME}`
    (secrets stay out of the drains file) and are never printed.
    """

    model_config = ConfigDict(extra="allow")

    name: str = Field(
        default="drainer",
        description="the Spark catalog name the table is addressed through",
    )
    type: str = Field(
        default="rest",
        description="Iceberg catalog type: `rest`, `jdbc`, `hive`, `glue`, `nessie`, `hadoop`",
    )
    uri: str | None = Field(
        default=None, description="the catalog's address, e.g. https://catalog.example.com"
    )
    warehouse: str | None = Field(
        default=None,
        description="where the catalog puts new tables (e.g. s3://bucket/warehouse), or the "
        "warehouse name a REST catalog knows",
    )

    @field_validator("name")
    @classmethod
    def _catalog_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use letters, digits and underscores only")
        return value

    @model_validator(mode="after")
    def _strings(self) -> CatalogConfig:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, str | int | float | bool):
                raise ValueError(f"catalog property {key!r} must be a string or a number")
        return self

    def properties(self) -> dict[str, str]:
        """The catalog's properties as Spark takes them (values still with `${NAME}`)."""
        props = {"type": self.type, **{k: str(v) for k, v in (self.model_extra or {}).items()}}
        if self.uri is not None:
            props["uri"] = self.uri
        if self.warehouse is not None:
            props["warehouse"] = self.warehouse
        return props

    def __repr_args__(self) -> list[tuple[str, Any]]:  # secrets: names only
        return [("name", self.name), ("type", self.type)]


class _SinkModel(BaseModel):
    """One sink type's keys: an unknown key is named with the key meant, a key of another type
    with the keys this one takes, and a block without `type` that holds another type's keys
    must say its type (it would be a postgres sink otherwise). Then `_require` checks the
    type's own required keys: after the key checks, so a misspelt `tabel` is named as such,
    not reported as a missing `table`."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _keys_of_this_type(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = cls.model_fields["type"].default
        allowed = set(cls.model_fields) - {"type"}
        owners = _key_owners()
        typeless = "type" not in data
        others = sorted(k for k in data if k in owners and k not in allowed)
        if typeless and others:  # `typ: delta` beside `path:` must not become a postgres sink
            kinds = sorted({t for k in others for t in owners[k]})
            keys = ", ".join(f"`{k}`" for k in others)
            raise ValueError(
                f"the sink has no `type` (so it is {kind}), but {keys} "
                f"{'belongs' if len(others) == 1 else 'belong'} to "
                f"{' or '.join(kinds)} sinks: set `type: {kinds[0]}`"
                + "".join(f"; {p}" for p in unknown_keys(data, set(owners) | {"type"}, "sink"))
            )
        problems = unknown_keys(
            {k: v for k, v in data.items() if k not in owners}, allowed | {"type"}, "sink"
        )
        if others:
            problems.append(
                f"{', '.join(others)} cannot be used with a {kind} sink (it takes "
                f"{', '.join(sorted(allowed))}): remove {'them' if len(others) > 1 else 'it'}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        cls._require(data)
        return data

    @classmethod
    def _require(cls, data: dict[str, Any]) -> None:
        """Raise ValueError naming a required key of this type that `data` lacks."""


def _key_owners() -> dict[str, set[str]]:
    """Every key any sink type takes, and the types that take it (`type` aside)."""
    owners: dict[str, set[str]] = {}
    for kind, model in SINK_MODELS.items():
        for key in set(model.model_fields) - {"type"}:
            owners.setdefault(key, set()).add(kind)
    return owners


# a column name, or a field of a struct column (`_key.id`)
_COLUMN_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def _column_list(value: list[str] | None, setting: str) -> list[str] | None:
    """`primary_key` / `order_by`: None, or distinct column names (a struct field as `c.f`)."""
    if value is None:
        return None
    if not value:
        raise ValueError(f"{setting} needs at least one column, or leave it out")
    bad = [c for c in value if not isinstance(c, str) or not _COLUMN_PATH.match(c)]
    if bad:
        raise ValueError(
            f"{bad[0]!r} is not a column name: use letters, digits and underscores "
            "(a struct's field as `column.field`)"
        )
    if len(set(value)) < len(value):
        raise ValueError(f"{setting} names a column twice: name each once")
    return value


class _TableWrite(BaseModel):
    """How a table sink writes: one row per output row, or one row per primary key
    (docs/lakehouse.md, "State tables"). drainer.sinks.upsert resolves these."""

    write: Literal["append", "upsert"] = Field(
        default="append",
        description="`append` (the default): one row per output row; `upsert`: one row per "
        "`primary_key`, the newest version by `order_by` kept, deletes leave a marker row "
        "(`_deleted_at` set) for `delete_retention`",
    )
    primary_key: list[str] | None = Field(
        default=None,
        description="upsert: the output columns that identify a row (a struct column's field "
        "as `col.field`); default `[_key]`, the record key as `key:` decodes it (a struct key "
        "is one column)",
    )
    order_by: list[str] | None = Field(
        default=None,
        description="upsert: the output columns that say which version is newer, compared in "
        "order; default `[_timestamp, _level, _partition, _offset]`; ties are broken by level, "
        "partition and offset",
    )
    delete_when: str | None = Field(
        default=None,
        description="upsert: a Spark SQL condition over the output row that makes the row a "
        "delete (e.g. `op = 'd'`); a tombstone (null value) always deletes its key",
    )
    delete_retention: str = Field(
        default="7d",
        description="upsert: how long a delete's marker row stays (so an older version drained "
        "later cannot bring the row back) before `drainer maintain` removes it: 90s, 15m, "
        "1h, 2d",
    )

    @field_validator("primary_key", "order_by")
    @classmethod
    def _columns(cls, value: list[str] | None, info: Any) -> list[str] | None:
        return _column_list(value, info.field_name)

    @field_validator("delete_retention")
    @classmethod
    def _retention(cls, value: str) -> str:
        duration_ms(value)
        return value

    @model_validator(mode="after")
    def _upsert_only(self) -> _TableWrite:
        if self.write == "append":
            given = [k for k in UPSERT_KEYS[1:] if k in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)} only apply to `write: upsert`: add `write: upsert` "
                    f"or remove {'them' if len(given) > 1 else 'it'}"
                )
        return self


class PostgresSinkConfig(_Routed, _TableWrite, _SinkModel):
    """A table in the drainer's own Postgres, published inside the run's commit transaction."""

    type: Literal["postgres"] = Field(
        default="postgres",
        description="sink kind; `postgres` (the default) writes into a table of the drainer "
        "database, `delta` into a Delta Lake table at `path`, `iceberg` into the Iceberg table "
        "`table` of a catalog (docs/lakehouse.md)",
    )
    table: str = Field(
        default="",
        description="postgres: target table, created from the output's columns when missing; "
        "each run's rows are staged in a table of their own, `<table>_r<run id>`, that the "
        "commit publishes. iceberg: `namespace.table` in the catalog, created from the "
        "output's columns when missing. Either may be a template over output columns "
        "(`events_{event_type}`): a table per value, created on first sight",
    )
    publish: Literal["attach", "copy"] = Field(
        default="attach",
        description="postgres only: how a target that drainer creates is published to: "
        "`attach` (the default) makes it partitioned by run, and the commit attaches the run's "
        "stage table as its partition (no row is copied); `copy` makes it a plain table, and "
        "the commit copies the rows in. An existing target is published to by its kind, "
        "whatever this says",
    )

    @classmethod
    def _require(cls, data: dict[str, Any]) -> None:
        if data.get("table") is None and data.get("route") is None:
            raise ValueError("a postgres sink needs `table: <name>` (or a `route`)")

    @field_validator("table")
    @classmethod
    def _plain_identifier(cls, value: str) -> str:
        if "{" in value or not value:  # a template (or a route's): _Routed checks its parts
            return value
        if not _NAME.match(value):
            raise ValueError("table must be a plain SQL identifier (letters, digits, underscores)")
        return check_table_name(value)


class DeltaSinkConfig(_Routed, _TableWrite, _SinkModel):
    """A Delta Lake table, committed by Spark before the Postgres commit, tagged with the run."""

    type: Literal["delta"] = Field(default="delta", description="`delta`")
    path: str = Field(
        default="",
        description="delta only: the table's location (or a template over output columns, "
        '`lake/{event_type}`: a table per value, docs/configuration.md "Routing"); a relative path is under the drainer\'s '
        "warehouse (DRAINER_WAREHOUSE), an absolute path, file://, s3a:// or abfss:// URI is "
        "used as is",
    )

    @classmethod
    def _require(cls, data: dict[str, Any]) -> None:
        if not str(data.get("path") or "").strip() and data.get("route") is None:
            raise ValueError(
                "a delta sink needs `path:` (relative: under DRAINER_WAREHOUSE; or an "
                "absolute path or URI)"
            )


class IcebergSinkConfig(_Routed, _TableWrite, _SinkModel):
    """An Iceberg table of a catalog, published by Spark before the Postgres commit."""

    type: Literal["iceberg"] = Field(default="iceberg", description="`iceberg`")
    table: str = Field(
        default="",
        description="iceberg: `namespace.table` in the catalog, or a template over output "
        "columns (`shop.{event_type}`: a table per value)",
    )
    catalog: CatalogConfig | None = Field(
        default=None,
        description="iceberg only: the catalog holding `table` (see `sink.catalog.*`); "
        "default: the embedded JDBC catalog `drainer` in the drainer's Postgres, tables in "
        "the warehouse",
    )

    @classmethod
    def _require(cls, data: dict[str, Any]) -> None:
        table = data.get("table")
        if data.get("route") is not None and table is None:
            return
        if not isinstance(table, str) or not _ICEBERG_TABLE.match(
            re.sub(r"\{[^{}]*\}", "x", table)  # a template's slots: _Routed checks them
        ):
            raise ValueError(
                "an iceberg sink needs `table: namespace.table` (identifiers joined by '.')"
            )


class KafkaSinkConfig(_SinkModel):
    """A Kafka topic, produced to in one Kafka transaction per run before the Postgres commit.

    Output rows follow Spark's Kafka sink schema: `value` (string or binary, required), optional
    `key`, `headers` (array of key/value structs), `partition`, and a per-row `topic` that
    routes the row to another topic. docs/kafka-sink.md says why the result is exactly once.
    """

    type: Literal["kafka"] = Field(default="kafka", description="`kafka`")
    topic: str = Field(
        description="kafka only: the topic every output row goes to unless the row names its "
        "own `topic` (created beforehand: `drainer topics create` or your cluster's tooling)"
    )
    kafka: dict[str, Any] | None = Field(
        default=None,
        description="kafka only: an output cluster of its own: `bootstrap.servers` plus the "
        "common settings of a drain's `kafka:` block (security.protocol, sasl.*, ssl.*), values "
        "may be ${NAME} references to the environment. Default: the drain's own cluster and "
        "`kafka:` block, for producing as for reading",
    )
    write: Literal["append", "upsert"] = Field(
        default="append",
        description="kafka: `append` (the default): one record per output row; `upsert`: the "
        "run's rows collapse to one record per output `key` (the newest by `order_by`), a "
        "delete (a null `value`, or `delete_when`) produced as a tombstone, into a compacted "
        "topic (docs/state-tables.md)",
    )
    order_by: list[str] | None = Field(
        default=None,
        description="kafka upsert: the output columns that say which version of a key is "
        "newer; default `[_timestamp, _level, _partition, _offset]` (the output must keep "
        "them); ties are broken by level, partition and offset",
    )
    delete_when: str | None = Field(
        default=None,
        description="kafka upsert: a Spark SQL condition over the output row that makes the "
        "row a tombstone (e.g. `op = 'd'`); a null `value` always is one",
    )
    producer: Literal["auto", "server", "driver"] = Field(
        default="auto",
        description="kafka only: where the run's one transactional producer runs. `server`: in "
        "the Spark Connect server's JVM, which the write's tasks share (a server `drainer "
        "services up` started with a JDK present, local master); `driver`: in the drain's own "
        "process (confluent-kafka), every output row streamed to it; `auto` (default): the "
        "server where it can (the drain's own cluster, no per-row `topic`), else the driver",
    )

    @classmethod
    def _require(cls, data: dict[str, Any]) -> None:
        topic = data.get("topic")
        if not isinstance(topic, str) or not _KAFKA_TOPIC.match(topic):
            raise ValueError(
                "a kafka sink needs `topic: NAME` (letters, digits, '.', '_', '-'; at most 249)"
            )

    @field_validator("kafka")
    @classmethod
    def _cluster_block(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        from drainer.config.kafka_clients import check_blocks

        if not str(value.get("bootstrap.servers") or "").strip():
            raise ValueError(
                "sink.kafka needs `bootstrap.servers: host:port[,host:port]` (the output "
                "cluster); leave out the block to produce to the drain's own cluster"
            )
        common = {k: v for k, v in value.items() if k != "bootstrap.servers"}
        check_blocks(common, {}, {})
        return value

    @field_validator("order_by")
    @classmethod
    def _order_columns(cls, value: list[str] | None) -> list[str] | None:
        return _column_list(value, "order_by")

    @model_validator(mode="after")
    def _upsert_only(self) -> KafkaSinkConfig:
        if self.write == "append":
            given = [k for k in ("order_by", "delete_when") if k in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)} only apply to `write: upsert`: add `write: upsert` "
                    f"or remove {'them' if len(given) > 1 else 'it'}"
                )
        return self


SINK_MODELS: dict[str, type[_SinkModel]] = {
    "postgres": PostgresSinkConfig,
    "delta": DeltaSinkConfig,
    "iceberg": IcebergSinkConfig,
    "kafka": KafkaSinkConfig,
}


def _sink_type(value: Any) -> str:
    """The union's tag: `type`, `postgres` when omitted."""
    if isinstance(value, dict):
        return str(value.get("type", DEFAULT_SINK_TYPE))
    return str(getattr(value, "type", DEFAULT_SINK_TYPE))


SinkConfig = Annotated[
    Annotated[PostgresSinkConfig, Tag("postgres")]
    | Annotated[DeltaSinkConfig, Tag("delta")]
    | Annotated[IcebergSinkConfig, Tag("iceberg")]
    | Annotated[KafkaSinkConfig, Tag("kafka")],
    Discriminator(
        _sink_type,
        custom_error_type="sink_type",
        custom_error_message="sink.type must be one of: postgres, delta, iceberg, kafka",
    ),
]
"""A drain's `sink:` block: the model of its `type`."""
