"""Delta Lake and Iceberg on our Spark: their jars, the server settings they need, where tables live.

Facts checked on this stack (pyspark 4.1, Java 17): Delta 4.3.x works (4.1 and 4.2 fail on
Spark >= 4.1.2), Iceberg 1.11.x works, both SQL extensions coexist in one session, and Iceberg's
JDBC catalog on Postgres needs the Postgres JDBC driver on the server. A Connect client cannot
add jars to a running server, so the server starts with the jars of the formats that the drains
file uses (`drainer services up`); nothing is loaded for a drains file without lakehouse sinks.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from sqlalchemy.engine import make_url

from drainer.config import DrainConfig, load_drains
from drainer.config.sinks import LAKEHOUSE_FORMATS, SinkConfig
from drainer.errors import ConfigError, DrainerError
from drainer.settings import Settings, expand_env_references

EXTENSIONS = {
    "delta": "io.delta.sql.DeltaSparkSessionExtension",
    "iceberg": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
}
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DEFAULT_CATALOG = "drainer"


def formats_in(drains: dict[str, DrainConfig]) -> tuple[str, ...]:
    """The table formats the drains write, in a fixed order."""
    used = {d.sink.type for d in drains.values()}
    return tuple(f for f in LAKEHOUSE_FORMATS if f in used)


def configured_formats(settings: Settings) -> tuple[str, ...]:
    """The formats the drains file needs; none when it cannot be read (its runs say why)."""
    try:
        return formats_in(load_drains(settings.config_path))
    except DrainerError:
        return ()


def server_conf(formats: tuple[str, ...]) -> dict[str, str]:
    """Static Spark settings a session needs for `formats` (set when the JVM starts)."""
    if not formats:
        return {}
    conf = {"spark.sql.extensions": ",".join(EXTENSIONS[f] for f in formats)}
    if "delta" in formats:
        conf["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    return conf


def _is_uri(path: str) -> bool:
    return bool(urlparse(path).scheme) and "://" in path


def warehouse_uri(settings: Settings) -> str:
    """The warehouse as a URI Spark and the catalogs take (`file://` for a folder)."""
    if _is_uri(settings.warehouse):
        return settings.warehouse.rstrip("/")
    return Path(settings.warehouse).expanduser().resolve().as_uri()


def delta_location(settings: Settings, sink: SinkConfig) -> str:
    """Where a Delta sink's table lives: relative paths under the warehouse."""
    path = sink.path or ""
    if _is_uri(path):
        return path.rstrip("/")
    if Path(path).expanduser().is_absolute():
        return str(Path(path).expanduser())
    base = warehouse_uri(settings)
    if base.startswith("file://"):
        return str(Path(urlparse(base).path) / path)
    return f"{base}/{path.strip('/')}"


def check_writable(settings: Settings, sink: SinkConfig) -> None:
    """A Delta table on a local path that this machine cannot write: a ConfigError naming it.

    Checked before a run reads anything (only for local paths: an object store answers for
    itself, and a remote Spark's file system is not this machine's).
    """
    if sink.type != "delta":
        return
    where = delta_location(settings, sink)
    if _is_uri(where) and not where.startswith("file://"):
        return
    path = Path(urlparse(where).path if where.startswith("file://") else where)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"sink.path {sink.path!r}: {existing or path} is not a folder this user can write, "
            f"so the Delta table {where} cannot be created there; choose another path (or "
            "DRAINER_WAREHOUSE) or fix the folder's permissions. Nothing was read or committed"
        )


def catalog_name(sink: SinkConfig) -> str:
    return sink.catalog.name if sink.catalog else DEFAULT_CATALOG


def iceberg_catalog_conf(settings: Settings, sink: SinkConfig) -> dict[str, str]:
    """Session settings defining the sink's Iceberg catalog, `${NAME}` references expanded.

    The embedded default is a JDBC catalog in the drainer's own Postgres (`iceberg_tables`,
    created by Iceberg) with its tables in the warehouse. Values may hold secrets: never print.
    """
    name = catalog_name(sink)
    prefix = f"spark.sql.catalog.{name}"
    if sink.catalog is None:
        url = make_url(settings.database_url)
        props = {
            "type": "jdbc",
            "uri": f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/"
            f"{url.database or 'postgres'}",
            "warehouse": warehouse_uri(settings),
            # without it the catalog refuses `<table>.snapshots` lookups (no view support)
            "jdbc.schema-version": "V1",
        }
        if url.username:
            props["jdbc.user"] = url.username
        if url.password:
            props["jdbc.password"] = url.password
    else:
        props = {}
        for key, value in sink.catalog.properties().items():
            expanded, missing = expand_env_references(value)
            if missing:
                raise ConfigError(
                    f"sink.catalog.{key} references the environment variable(s) "
                    f"{', '.join(missing)}, which are not set in this process: export them"
                )
            props[key] = expanded
    # a cached table is not refreshed when another client (a crashed attempt's write that the
    # server finished) commits: the search for the run's snapshot must see the catalog's state
    props.setdefault("cache-enabled", "false")
    return {prefix: "org.apache.iceberg.spark.SparkCatalog"} | {
        f"{prefix}.{k}": v for k, v in props.items()
    }


def table_label(settings: Settings, sink: SinkConfig) -> str:
    """The sink's table in words, for status and Dagster: a location or a catalog table."""
    if sink.type == "delta":
        return delta_location(settings, sink)
    return f"{catalog_name(sink)}.{sink.table}"
