"""The Iceberg sink, driver side: its catalog, where the table lives, what Spark needs.

Spark publishes the run's snapshot (write-audit-publish, spark_jobs.sinks.iceberg) before the
Postgres commit; the Postgres transaction then only records it.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from drainer.config.sink_models import IcebergSinkConfig
from drainer.errors import ConfigError
from drainer.settings import expand_env_references
from drainer.sinks.base import Capabilities, TableSink, local_folder, warehouse_uri

ICEBERG_VERSION = "1.11.0"
POSTGRES_JDBC_VERSION = "42.7.8"
DEFAULT_CATALOG = "drainer"


class IcebergSink(TableSink[IcebergSinkConfig]):
    type = "iceberg"
    capabilities = Capabilities(
        commit="before_postgres",
        jars=(
            f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{ICEBERG_VERSION}",
            # Iceberg's JDBC catalog (the embedded default) reaches Postgres through it
            f"org.postgresql:postgresql:{POSTGRES_JDBC_VERSION}",
        ),
        spark_extension="org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        table_maintenance=True,
        commit_id="snapshot",
        files=True,
    )

    @property
    def catalog(self) -> str:
        return self.config.catalog.name if self.config.catalog else DEFAULT_CATALOG

    @property
    def table(self) -> str:
        """`namespace.table` inside the catalog."""
        return self.config.table

    def location(self) -> str:
        """`catalog.namespace.table`, as Spark addresses it."""
        return f"{self.catalog}.{self.table}"

    def describe(self) -> str:
        return f"Iceberg table {self.location()}"

    def uri(self) -> str:
        return f"iceberg://{self.catalog}/{self.table.replace('.', '/')}"

    def data_folder(self) -> Path | None:
        """The embedded JDBC catalog's layout, <warehouse>/<ns>/<table>; None for others."""
        if self.config.catalog is not None:
            return None
        return local_folder(f"{warehouse_uri(self.settings)}/{self.table.replace('.', '/')}")

    def session_key(self) -> str:
        """A session keeps the catalog it initialized first: another block, another session."""
        if self.config.catalog is None:
            return ""
        return repr(sorted(self.config.catalog.properties().items()))

    def session_conf(self) -> dict[str, str]:
        return self.catalog_conf()

    def catalog_conf(self) -> dict[str, str]:
        """Session settings defining the catalog, `${NAME}` references expanded.

        The embedded default is a JDBC catalog in the drainer's own Postgres (`iceberg_tables`,
        created by Iceberg) with its tables in the warehouse. Values may hold secrets: never
        print them.
        """
        prefix = f"spark.sql.catalog.{self.catalog}"
        if self.config.catalog is None:
            url = make_url(self.settings.database_url)
            props = {
                "type": "jdbc",
                "uri": f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/"
                f"{url.database or 'postgres'}",
                "warehouse": warehouse_uri(self.settings),
                # without it the catalog refuses `<table>.snapshots` lookups (no view support)
                "jdbc.schema-version": "V1",
            }
            if url.username:
                props["jdbc.user"] = url.username
            if url.password:
                props["jdbc.password"] = url.password
        else:
            props = {}
            for key, value in self.config.catalog.properties().items():
                expanded, missing = expand_env_references(value)
                if missing:
                    raise ConfigError(
                        f"sink.catalog.{key} references the environment variable(s) "
                        f"{', '.join(missing)}, which are not set in this process: export them"
                    )
                props[key] = expanded
        # a cached table is not refreshed when another client (a crashed attempt's write that
        # the server finished) commits: the search for the run's snapshot must see the catalog
        props.setdefault("cache-enabled", "false")
        return {prefix: "org.apache.iceberg.spark.SparkCatalog"} | {
            f"{prefix}.{k}": v for k, v in props.items()
        }
