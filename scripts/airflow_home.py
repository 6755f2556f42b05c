"""Run a real Airflow on this repository's drains: API server, scheduler and DAG processor.

Airflow's metadata lives in Postgres, in a database beside drainer's own on the same server
(`<drainer's database>_airflow`, or DRAINER_AIRFLOW_DATABASE_URL), created here if missing, as
scripts/dagster_home.py does for Dagster: the scheduler, the DAG processor, the API server and
the LocalExecutor's task processes share one store. Not drainer's own database: Airflow's
tables (`dag_run`, `log`, …) would sit among drainer's.

Everything is set through Airflow's `AIRFLOW__SECTION__KEY` variables (`airflow_env`), none
through an airflow.cfg, so the tests start the same deployment on a home and a port of their
own (tests/integration/airflow_stack.py). The API server binds 127.0.0.1 and lets every
visitor in as admin (the simple auth manager's `all_admins`), as `dagster dev` does: a local
development deployment, not one to expose.

    python scripts/airflow_home.py [--port 8080]    # what `make airflow` runs
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy.engine import make_url

from drainer.settings import Settings, load_settings
from drainer.store.server import ensure_database

REPO = Path(__file__).resolve().parent.parent
DAGS_FOLDER = REPO / "airflow_dags"
COMPONENTS = ("api-server", "scheduler", "dag-processor")


def metadata_url(settings: Settings | None = None) -> str:
    """Airflow's database: DRAINER_AIRFLOW_DATABASE_URL, else `<drainer's database>_airflow`,
    with the psycopg2 driver Airflow's Postgres support is written for."""
    settings = settings or load_settings()
    url = make_url(settings.airflow_database_url or settings.database_url)
    if not settings.airflow_database_url:
        url = url.set(database=f"{url.database or 'drainer'}_airflow")
    return url.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)


def airflow_env(
    home: Path, port: int, database_url: str, dags_folder: Path = DAGS_FOLDER
) -> dict[str, str]:
    """The variables every Airflow process of one deployment shares (a fresh JWT secret per
    start: the API server signs the task processes' tokens with it, the scheduler checks)."""
    api = f"http://127.0.0.1:{port}"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        # the API server's async engine: psycopg 3's (drainer's driver), not asyncpg
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": str(
            make_url(database_url)
            .set(drivername="postgresql+psycopg_async")
            .render_as_string(hide_password=False)
        ),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": api,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        # a new or edited DAG file is seen in seconds, not Airflow's 5 minutes
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # two cores: one task at a time per deployment is what the drains need
        "AIRFLOW__CORE__PARALLELISM": "4",
    }


def prepare(home: Path, port: int, dags_folder: Path = DAGS_FOLDER) -> dict[str, str]:
    """Create the metadata database if missing, migrate it; the processes' environment."""
    url = metadata_url()
    if ensure_database(make_url(url)):
        print(f"created Airflow's metadata database {make_url(url).database}")
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **airflow_env(home, port, url, dags_folder)}
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
    return env


def start(env: dict[str, str], logs: Path | None = None) -> list[subprocess.Popen[bytes]]:
    """The three processes, each in its own process group (stopped with its children)."""
    airflow = str(Path(sys.executable).parent / "airflow")
    procs = []
    for component in COMPONENTS:
        out = open(logs / f"{component}.log", "ab") if logs else None  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [airflow, component],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                start_new_session=True,
            )
        )
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--home", type=Path, default=REPO / ".airflow_home")
    args = parser.parse_args()
    env = prepare(args.home, args.port)
    procs = start(env)
    print(f"Airflow: http://127.0.0.1:{args.port} (AIRFLOW_HOME={args.home}); Ctrl-C stops it")
    try:
        while all(proc.poll() is None for proc in procs):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop(procs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
