"""scripts/airflow_home.py: Airflow's metadata in Postgres beside drainer's database, and the
variables every process of one deployment shares (no Airflow import needed)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from airflow_home import DAGS_FOLDER, airflow_env, metadata_url  # noqa: E402


def test_metadata_is_a_database_of_its_own_beside_drainers(monkeypatch):
    monkeypatch.delenv("DRAINER_AIRFLOW_DATABASE_URL", raising=False)
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:s3cret@db.internal:6543/drains")
    assert metadata_url() == "postgresql+psycopg2://ops:s3cret@db.internal:6543/drains_airflow"
    monkeypatch.setenv("DRAINER_AIRFLOW_DATABASE_URL", "postgresql://airflow@db2/airflow")
    assert metadata_url() == "postgresql+psycopg2://airflow@db2/airflow"


def test_every_process_gets_the_same_database_api_and_local_executor(tmp_path):
    url = "postgresql+psycopg2://ops:s3cret@db.internal:6543/drains_airflow"
    env = airflow_env(tmp_path, 18080, url)
    assert env["AIRFLOW_HOME"] == str(tmp_path)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == url
    # the API server's async engine on psycopg 3, drainer's own driver (no asyncpg)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == (
        "postgresql+psycopg_async://ops:s3cret@db.internal:6543/drains_airflow"
    )
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(DAGS_FOLDER)
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    # a secret of its own per start, shared by the processes started together
    assert (
        airflow_env(tmp_path, 18080, url)["AIRFLOW__API_AUTH__JWT_SECRET"]
        != (env["AIRFLOW__API_AUTH__JWT_SECRET"])
    )
