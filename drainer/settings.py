"""Connection settings from the environment (DESIGN §10).

Connections live in environment variables, drains in the YAML file, so one config file can be
pointed at a laptop stack or at production brokers without edits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_DATABASE_URL = "postgresql+psycopg://drainer@127.0.0.1:55432/drainer"
DEFAULT_SPARK_MASTER = "local[*]"


@dataclass(frozen=True)
class Settings:
    """Where the services are; read once per process from the environment."""

    bootstrap_servers: str
    database_url: str
    database_url_from_env: bool
    spark_master: str
    home: Path
    config_path: Path

    @property
    def local_kafka(self) -> bool:
        """True when the broker is ours to start (the default loopback address)."""
        return not os.environ.get("KAFKA_BOOTSTRAP_SERVERS")

    @property
    def local_postgres(self) -> bool:
        """True when no database URL was given, so `services up` runs a local server."""
        return not self.database_url_from_env


def load_settings() -> Settings:
    url = os.environ.get("DRAINER_DATABASE_URL") or os.environ.get("DATABASE_URL")
    home = Path(os.environ.get("DRAINER_HOME", Path.home() / ".cache" / "drainer")).expanduser()
    config = os.environ.get("DRAINER_CONFIG")
    return Settings(
        bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP),
        database_url=_sqlalchemy_url(url or DEFAULT_DATABASE_URL),
        database_url_from_env=bool(url),
        spark_master=os.environ.get("SPARK_MASTER", DEFAULT_SPARK_MASTER),
        home=home,
        config_path=Path(config).expanduser() if config else REPO_ROOT / "drains.yaml",
    )


def _sqlalchemy_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (what psql and most tools print) and use psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def psycopg_url(sqlalchemy_url: str) -> str:
    """The libpq form of a SQLAlchemy URL, for psycopg connections opened in Spark tasks."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
