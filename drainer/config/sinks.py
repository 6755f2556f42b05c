"""Where a drain's output goes: a Postgres table, a Delta table or an Iceberg table (and its
catalog), each field documented where it is declared and checked at load time."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from drainer.errors import ConfigError
from drainer.store.sink_names import check_table_name

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ICEBERG_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
LAKEHOUSE_FORMATS = ("delta", "iceberg")


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


class SinkConfig(BaseModel):
    """Where a drain's output goes: a Postgres table, a Delta table or an Iceberg table."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["postgres", "delta", "iceberg"] = Field(
        default="postgres",
        description="sink kind; `postgres` writes into a table of the drainer database, "
        "`delta` into a Delta Lake table at `path`, `iceberg` into the Iceberg table `table` "
        "of a catalog (docs/lakehouse.md)",
    )
    table: str | None = Field(
        default=None,
        description="postgres: target table, created from the output's columns when missing; "
        "each run's rows are staged in a table of their own, `<table>_r<run id>`, that the "
        "commit publishes. iceberg: `namespace.table` in the catalog, created from the "
        "output's columns when missing",
    )
    publish: Literal["attach", "copy"] | None = Field(
        default=None,
        description="postgres only: how a target that drainer creates is published to: "
        "`attach` (the default) makes it partitioned by run, and the commit attaches the run's "
        "stage table as its partition (no row is copied); `copy` makes it a plain table, and "
        "the commit copies the rows in. An existing target is published to by its kind, "
        "whatever this says",
    )
    path: str | None = Field(
        default=None,
        description="delta only: the table's location; a relative path is under the drainer's "
        "warehouse (DRAINER_WAREHOUSE), an absolute path, file://, s3a:// or abfss:// URI is "
        "used as is",
    )
    catalog: CatalogConfig | None = Field(
        default=None,
        description="iceberg only: the catalog holding `table` (see `sink.catalog.*`); "
        "default: the embedded JDBC catalog `drainer` in the drainer's Postgres, tables in "
        "the warehouse",
    )

    @property
    def postgres_table(self) -> str:
        """The target table of a Postgres sink (the validator guarantees one)."""
        if self.type != "postgres" or self.table is None:
            raise ConfigError(f"a {self.type} sink has no Postgres target table")
        return self.table

    @model_validator(mode="after")
    def _fields_of_type(self) -> SinkConfig:
        given = self.model_fields_set - {"type"}
        allowed = {
            "postgres": {"table", "publish"},
            "delta": {"path"},
            "iceberg": {"table", "catalog"},
        }[self.type]
        wrong = sorted(given - allowed)
        if wrong:
            raise ValueError(
                f"{', '.join(wrong)} cannot be used with a {self.type} sink (it takes "
                f"{', '.join(sorted(allowed))}): remove {'them' if len(wrong) > 1 else 'it'}"
            )
        if self.type == "postgres":
            if self.table is None:
                raise ValueError("a postgres sink needs `table: <name>`")
            if not _NAME.match(self.table):
                raise ValueError(
                    "table must be a plain SQL identifier (letters, digits, underscores)"
                )
            check_table_name(self.table)
        elif self.type == "delta":
            if not self.path or not self.path.strip():
                raise ValueError(
                    "a delta sink needs `path:` (relative: under DRAINER_WAREHOUSE; or an "
                    "absolute path or URI)"
                )
        elif self.table is None or not _ICEBERG_TABLE.match(self.table):
            raise ValueError(
                "an iceberg sink needs `table: namespace.table` (identifiers joined by '.')"
            )
        return self

    @property
    def lakehouse(self) -> bool:
        """True for a table-format sink (Delta, Iceberg): written by Spark, not staged in Postgres."""
        return self.type in LAKEHOUSE_FORMATS

    @property
    def publish_mode(self) -> str:
        return self.publish or "attach"
