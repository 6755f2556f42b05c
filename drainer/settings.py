"""Every environment variable drainer reads, read here and nowhere else (docs/configuration.md).

Connections live in environment variables, drains in the YAML file, so one config file can be
pointed at a laptop stack or at production brokers without edits.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from drainer.local_secrets import CONNECT_TOKEN, POSTGRES_PASSWORD, read_secret

REPO_ROOT = Path(__file__).resolve().parent.parent

DEFAULT_KAFKA_PORT = 9092
DEFAULT_POSTGRES_PORT = 55432
DEFAULT_DATABASE_URL = f"postgresql+psycopg://drainer@127.0.0.1:{DEFAULT_POSTGRES_PORT}/drainer"
LOCAL_ROLE = "drainer"
DEFAULT_SPARK_MASTER = "local[*]"
DEFAULT_CONNECT_PORT = 15002


@dataclass(frozen=True)
class Settings:
    """Where the services are; read once per process from the environment."""

    bootstrap_servers: str
    database_url: str
    database_url_from_env: bool
    spark_master: str
    home: Path
    config_path: Path
    spark_remote: str | None = None
    """SPARK_REMOTE: a Spark Connect endpoint (`sc://host:port`) every run uses; None when unset."""
    spark_master_from_env: bool = False
    """True when SPARK_MASTER was given: runs use an in-process session on that master."""
    spark_driver_memory: str = "2g"
    """DRAINER_SPARK_DRIVER_MEMORY: heap of a JVM drainer starts (in-process or Connect server)."""
    shuffle_partitions: str = "8"
    """DRAINER_SHUFFLE_PARTITIONS: small batches on few cores; 200 would be mostly overhead."""
    spark_ui: bool = False
    """DRAINER_SPARK_UI: Spark's web UI in the JVMs drainer starts (off: no port is opened)."""
    spark_log_level: str = "WARN"
    """DRAINER_SPARK_LOG_LEVEL: log level of an in-process session."""
    spark_shared_session: bool = True
    """DRAINER_SPARK_SHARED_SESSION: runs on a Connect server share one session (and its warm
    Python workers) per version of the code; `false` gives every run its own."""
    python_path: str = ""
    """PYTHONPATH, passed on to the Connect server so its Python workers import drainer."""

    @property
    def local_spark_connect(self) -> bool:
        """True when `services up` runs the Spark Connect server (neither SPARK_* variable set)."""
        return self.spark_remote is None and not self.spark_master_from_env

    @property
    def spark_endpoint(self) -> str | None:
        """The Connect endpoint runs use, or None for an in-process session on `spark_master`.

        SPARK_REMOTE wins; SPARK_MASTER alone means in-process; neither means the local Connect
        server (`spark_jobs.session` falls back to `local[*]` when that server is not running).
        """
        if self.spark_remote:
            return self.spark_remote
        return None if self.spark_master_from_env else f"sc://localhost:{self.connect_port}"

    connect_port: int = DEFAULT_CONNECT_PORT
    """DRAINER_CONNECT_PORT: where the local Connect server listens (one per checkout or venv)."""
    connect_token: str | None = None
    """The token the Connect servers drainer starts require (`<home>/secrets/spark-connect.token`,
    made by `drainer services up`); sent only to the local one, never to SPARK_REMOTE."""
    dagster_database_url: str | None = None
    """DRAINER_DAGSTER_DATABASE_URL: the database that holds Dagster's run, event and schedule
    storage (`make dagster`, scripts/dagster_home.py); None: drainer's server, database
    `<drainer's database>_dagster`."""
    airflow_database_url: str | None = None
    """DRAINER_AIRFLOW_DATABASE_URL: Airflow's metadata database (`make airflow`,
    scripts/airflow_home.py); None: drainer's server, database `<drainer's database>_airflow`."""
    fault: str | None = None
    """DRAINER_FAULT: a crash point for the fault-injection tests (drainer.faults)."""
    warehouse: str = ""
    """DRAINER_WAREHOUSE: where lakehouse tables live (relative Delta paths, the embedded Iceberg
    catalog's tables); a folder or an object-store URI. Default: `<home>/warehouse`."""

    bootstrap_from_env: bool = False
    """True when KAFKA_BOOTSTRAP_SERVERS was given: the brokers are not ours to start."""

    @property
    def local_kafka(self) -> bool:
        """True when the broker is ours to start (the default loopback address)."""
        return not self.bootstrap_from_env

    @property
    def local_postgres(self) -> bool:
        """True when no database URL was given, so `services up` runs a local server."""
        return not self.database_url_from_env


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `env` (the process environment when None): a caller with settings of its
    own (the Dagster resource's config) passes its overrides here, never into os.environ."""
    env = os.environ if env is None else env
    url = env.get("DRAINER_DATABASE_URL") or env.get("DATABASE_URL")
    home = Path(env.get("DRAINER_HOME", Path.home() / ".cache" / "drainer")).expanduser()
    config = env.get("DRAINER_CONFIG")
    master = env.get("SPARK_MASTER")
    return Settings(
        # the local broker listens on DRAINER_KAFKA_PORT (PLAINTEXT) and the three ports after it
        bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS")
        or f"127.0.0.1:{int(env.get('DRAINER_KAFKA_PORT') or DEFAULT_KAFKA_PORT)}",
        # the local server listens on DRAINER_POSTGRES_PORT when no URL is given
        database_url=_sqlalchemy_url(url)
        if url
        else local_database_url(
            home, int(env.get("DRAINER_POSTGRES_PORT") or DEFAULT_POSTGRES_PORT)
        ),
        database_url_from_env=bool(url),
        spark_master=master or DEFAULT_SPARK_MASTER,
        home=home,
        config_path=Path(config).expanduser() if config else _default_config(),
        spark_remote=env.get("SPARK_REMOTE") or None,
        spark_master_from_env=bool(master),
        spark_driver_memory=env.get("DRAINER_SPARK_DRIVER_MEMORY", "2g"),
        shuffle_partitions=env.get("DRAINER_SHUFFLE_PARTITIONS", "8"),
        spark_ui=env.get("DRAINER_SPARK_UI", "false").lower() in ("1", "true", "yes"),
        spark_log_level=env.get("DRAINER_SPARK_LOG_LEVEL", "WARN"),
        spark_shared_session=env.get("DRAINER_SPARK_SHARED_SESSION", "true").lower()
        not in ("0", "false", "no"),
        python_path=env.get("PYTHONPATH", ""),
        connect_port=int(env.get("DRAINER_CONNECT_PORT") or DEFAULT_CONNECT_PORT),
        connect_token=read_secret(home, CONNECT_TOKEN),
        dagster_database_url=env.get("DRAINER_DAGSTER_DATABASE_URL") or None,
        airflow_database_url=env.get("DRAINER_AIRFLOW_DATABASE_URL") or None,
        fault=env.get("DRAINER_FAULT") or None,
        warehouse=env.get("DRAINER_WAREHOUSE") or str(home / "warehouse"),
        bootstrap_from_env=bool(env.get("KAFKA_BOOTSTRAP_SERVERS")),
    )


def settings_with(overrides: Mapping[str, str | None]) -> Settings:
    """The environment's settings with the variables in `overrides` set (None or empty: left
    as the environment has them), for one caller only: nothing else in the process sees them."""
    return load_settings({**os.environ, **{k: v for k, v in overrides.items() if v}})


SECRET_SOURCES = ("DRAINER_DATABASE_URL", "DATABASE_URL", "DRAINER_HOME", "HOME")
"""The environment variables `load_settings` takes its secrets' values or files from (the
database URL, the home holding the secret files): the key `redact` remembers them under."""


def secret_sources() -> tuple[str | None, ...]:
    """The values of SECRET_SOURCES now: equal values, equal secrets (the files aside)."""
    return tuple(os.environ.get(name) for name in SECRET_SOURCES)


def environment_secrets() -> frozenset[str]:
    """The secrets the environment's settings hold, for `redact`, which stars them in every
    line the process writes, whichever settings its runs were handed (a line may come from
    code that holds none). Read here, where every variable is read."""
    return _secrets_of(secret_sources())


@functools.lru_cache(maxsize=16)
def _secrets_of(sources: tuple[str | None, ...]) -> frozenset[str]:
    """The database password (as written in the URL and decoded) and the Connect token, as
    settings with these `secret_sources()` give them: loaded (secret files read) once per
    distinct environment, not once per line redacted. A secret file made or changed later is
    registered when it is read (`local_secrets.secrets_read`), as it is before any use."""
    settings = load_settings()
    found = {settings.connect_token or ""}
    try:
        password = urlsplit(settings.database_url).password or ""
    except ValueError:  # not a URL: the connection fails and says so
        password = ""
    found |= {password, unquote(password)}
    return frozenset(found)


def local_database_url(home: Path, port: int = DEFAULT_POSTGRES_PORT) -> str:
    """The local server's URL at `port`, with the password `drainer services up` generated
    (SCRAM)."""
    url = DEFAULT_DATABASE_URL.replace(f":{DEFAULT_POSTGRES_PORT}/", f":{port}/", 1)
    password = read_secret(home, POSTGRES_PASSWORD)
    if password is None:
        return url
    user = f"{LOCAL_ROLE}:{quote(password, safe='')}"
    return url.replace(f"//{LOCAL_ROLE}@", f"//{user}@", 1)


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env_references(value: str) -> tuple[str, list[str]]:
    """`value` with each `${NAME}` replaced by the environment variable; and the names unset.

    For settings in the drains file that must not be written there (passwords): the file says
    `${KAFKA_PASSWORD}`, the environment of each process that connects holds the secret.
    """
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is None:
            missing.append(match.group(1))
            return ""
        return found

    return _ENV_REFERENCE.sub(substitute, value), missing


def _default_config() -> Path:
    """`./drains.yaml` where it exists, else the checkout's demo file (`make demo`)."""
    here = Path.cwd() / "drains.yaml"
    return (
        here
        if here.exists() or not (REPO_ROOT / "drains.yaml").exists()
        else REPO_ROOT / "drains.yaml"
    )


def export_spark_python_env(local_master: bool) -> None:
    """Make Spark's Python workers run this interpreter, and a local Spark stay on loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local_master:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no LAN lookups


def _sqlalchemy_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (what psql and most tools print) and use psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def psycopg_url(sqlalchemy_url: str) -> str:
    """The libpq form of a SQLAlchemy URL, for psycopg connections opened in Spark tasks."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


def set_config_path(path: Path | str | None) -> None:
    """Make `path` the drains file (DRAINER_CONFIG) of this process and its children."""
    if path is None:
        os.environ.pop("DRAINER_CONFIG", None)
    else:
        os.environ["DRAINER_CONFIG"] = str(path)


@contextlib.contextmanager
def use_config_path(path: Path) -> Iterator[None]:
    """`set_config_path` for the duration of a block, then back to what it was."""
    previous = os.environ.get("DRAINER_CONFIG")
    set_config_path(path)
    try:
        yield
    finally:
        set_config_path(previous)


CONNECTION_VARIABLES: dict[str, tuple[str, ...]] = {
    "KAFKA_BOOTSTRAP_SERVERS": ("KAFKA_BOOTSTRAP_SERVERS",),
    "DRAINER_DATABASE_URL": ("DRAINER_DATABASE_URL", "DATABASE_URL"),
    "SPARK_REMOTE": ("SPARK_REMOTE",),
    "SPARK_MASTER": ("SPARK_MASTER",),
    "DRAINER_CONFIG": ("DRAINER_CONFIG",),
}
"""The variables an orchestrator may set per run (Dagster's DrainerResource): where the
services are and which drains file, each with the names it is read from, first wins."""


def connection_variable(name: str) -> str | None:
    """Which variable `name` (a CONNECTION_VARIABLES key) is read from here; None when unset."""
    return next((found for found in CONNECTION_VARIABLES[name] if os.environ.get(found)), None)
