"""The Delta Lake sink, driver side: where the table lives and what Spark needs to write it.

Spark writes and commits the table before the Postgres commit, with the run's identity in the
commit (spark_jobs.sinks.delta); the Postgres transaction then only records that commit.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from sqlalchemy import Connection

from drainer.config.sink_models import DeltaSinkConfig
from drainer.errors import ConfigError
from drainer.sinks.base import Capabilities, TableSink, is_uri, local_folder, warehouse_uri
from drainer.store import runs

# Delta 4.1 and 4.2 fail on Spark >= 4.1.2 (docs/lakehouse.md)
DELTA_VERSION = "4.3.1"


class DeltaSink(TableSink[DeltaSinkConfig]):
    type = "delta"
    capabilities = Capabilities(
        commit="before_postgres",
        jars=(
            f"io.delta:delta-spark_4.1_2.13:{DELTA_VERSION}",
            f"io.delta:delta-storage:{DELTA_VERSION}",
        ),
        spark_extension="io.delta.sql.DeltaSparkSessionExtension",
        spark_conf={
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        },
        table_maintenance=True,
        commit_id="version",
        files=True,
    )

    def location(self) -> str:
        """Relative paths under the warehouse; absolute paths and URIs as they are."""
        path = self.config.path
        if is_uri(path):
            return path.rstrip("/")
        if Path(path).expanduser().is_absolute():
            return str(Path(path).expanduser())
        base = warehouse_uri(self.settings)
        if base.startswith("file://"):
            return str(Path(urlparse(base).path) / path)
        return f"{base}/{path.strip('/')}"

    def describe(self) -> str:
        return f"Delta table {self.location()}"

    def discard(self, conn: Connection, run_id: int) -> None:
        """Delta adds a write's new columns with its commit (`mergeSchema`), and an abandoned
        plan has none (abandon refuses one whose commit landed): the columns its attempts
        noted before writing were never added. (Iceberg adds them before its append, so an
        abandoned Iceberg plan's stay on record: the table has them.)"""
        runs.forget_columns_added(conn, run_id)

    def data_folder(self) -> Path | None:
        return local_folder(self.location())

    def check_writable(self) -> None:
        """A table on a local path this machine cannot write: a ConfigError naming it.

        Only for local paths: an object store answers for itself, and a remote Spark's file
        system is not this machine's.
        """
        if self.settings.spark_remote is not None:
            return
        where = self.location()
        path = local_folder(where)
        if path is None:
            return
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(
                f"sink.path {self.config.path!r}: {existing or path} is not a folder this user "
                f"can write, so the Delta table {where} cannot be created there; choose another "
                "path (or DRAINER_WAREHOUSE) or fix the folder's permissions. Nothing was read "
                "or committed"
            )
