"""scripts/dagster_home.py: Dagster's storage in Postgres beside drainer's database."""

import stat
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from dagster_home import MARKER, storage_env, storage_url, write_dagster_yaml  # noqa: E402


def test_storage_is_a_database_of_its_own_beside_drainers(monkeypatch):
    monkeypatch.delenv("DRAINER_DAGSTER_DATABASE_URL", raising=False)
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:s3cret@db.internal:6543/drains")
    # psycopg2: the driver dagster-postgres's NOTIFY works with
    assert storage_url() == "postgresql+psycopg2://ops:s3cret@db.internal:6543/drains_dagster"
    monkeypatch.setenv("DRAINER_DAGSTER_DATABASE_URL", "postgresql://dagster@db2/dagster")
    assert storage_url() == "postgresql+psycopg2://dagster@db2/dagster"


def test_dagster_yaml_keeps_runs_events_and_schedules_in_postgres(tmp_path):
    url = "postgresql+psycopg2://ops:s3cret@db.internal:6543/drains_dagster"
    config = write_dagster_yaml(tmp_path, url)
    written = yaml.safe_load(config.read_text())
    # the password by name only: Dagster puts this block on code servers' command lines
    assert written["storage"] == {
        "postgres": {
            "postgres_db": {
                "username": "ops",
                "password": {"env": "DAGSTER_PG_PASSWORD"},
                "hostname": "db.internal",
                "port": 6543,
                "db_name": "drains_dagster",
                "scheme": "postgresql+psycopg2",
            }
        }
    }
    assert "s3cret" not in config.read_text()
    assert storage_env(url) == {"DAGSTER_PG_PASSWORD": "s3cret"}
    assert written["concurrency"]["pools"] == {"default_limit": 1, "granularity": "run"}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # the URL may carry a password
    assert config.read_text().startswith(MARKER)


def test_a_dagster_yaml_of_ones_own_is_left_alone(tmp_path):
    config = tmp_path / "dagster.yaml"
    config.write_text("storage:\n  sqlite:\n    base_dir: /var/dagster\n")
    write_dagster_yaml(tmp_path, "postgresql+psycopg2://x@y/z")
    assert "sqlite" in config.read_text()


def test_a_storage_url_without_password_is_written_as_it_is(tmp_path):
    url = "postgresql+psycopg2://dagster@db2:5432/dagster?sslmode=require"
    written = yaml.safe_load(write_dagster_yaml(tmp_path, url).read_text())
    assert written["storage"] == {"postgres": {"postgres_url": url}}
    assert storage_env(url) == {}
