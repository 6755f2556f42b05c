"""Prepare DAGSTER_HOME: Dagster's storage in Postgres, one run at a time per drain's pool.

Dagster's run, event-log and schedule storage live in Postgres (dagster-postgres), in a database
beside drainer's own on the same server (`<drainer's database>_dagster`, or
DRAINER_DAGSTER_DATABASE_URL), created here if missing: the production setting, so runs, their
logs and schedule ticks survive the machine and the webserver, the daemon and every run worker
share one store (SQLite files in DAGSTER_HOME lock under concurrent writers). Not drainer's own
database: Dagster's `runs` table would collide with drainer's.

Each drain's asset sits in its own pool (`drain_<name>`), and every pool is limited to one run
(`granularity: run`: the run queue holds a second run of the drain until the first ends, rather
than starting its process to wait inside a step). So one run of a drain at a time across the
instance, on top of drainer's own Postgres lock; the runs a backfill splits into run one after
another, and the first drains the whole backfill (dagster_project/launches.py).
The integration tests start their webserver and daemon on a home written by this same function.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from sqlalchemy.engine import make_url

from drainer.settings import Settings, load_settings
from drainer.store.server import ensure_database

MARKER = "# written by scripts/dagster_home.py"
DAGSTER_YAML = f"""\
{MARKER}
storage:
  postgres:
{{storage}}
concurrency:
  runs:
    max_concurrent_runs: 4
  pools:
    default_limit: 1
    granularity: run
run_queue:
  # the daemon looks at the queue every second (Dagster's default is 5 s): a run launched
  # from the UI starts that much sooner
  dequeue_interval_seconds: 1
telemetry:
  enabled: false
"""


def storage_url(settings: Settings | None = None) -> str:
    """Dagster's database: DRAINER_DAGSTER_DATABASE_URL, else `<drainer's database>_dagster`.

    With the psycopg2 driver dagster-postgres is written for: SQLAlchemy 2.1 reads a plain
    `postgresql://` as psycopg 3, whose server-side parameters break Dagster's `NOTIFY`.
    """
    settings = settings or load_settings()
    url = make_url(settings.dagster_database_url or settings.database_url)
    if not settings.dagster_database_url:
        url = url.set(database=f"{url.database or 'drainer'}_dagster")
    return url.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)


PASSWORD_ENV = "DAGSTER_PG_PASSWORD"


def storage_config(storage: str) -> dict[str, object]:
    """dagster.yaml's `storage: postgres:` block for the URL; its password, if any, by name.

    A password written into dagster.yaml would travel in Dagster's instance reference, which
    the webserver passes to every code server it starts on its command line (`--instance-ref`),
    where any user of the machine reads it (`ps`). `{env: DAGSTER_PG_PASSWORD}` travels instead,
    the way Dagster's own deployment guides write it; `storage_env` gives the value.
    """
    url = make_url(storage)
    if not url.password:
        return {"postgres_url": storage}
    db: dict[str, object] = {
        "username": url.username or "",
        "password": {"env": PASSWORD_ENV},
        "hostname": url.host or "localhost",
        "port": url.port or 5432,
        "db_name": url.database or "",
        "scheme": url.drivername,
    }
    if url.query:
        db["params"] = dict(url.query)
    return {"postgres_db": db}


def storage_env(storage: str) -> dict[str, str]:
    """The environment Dagster's processes need for `storage_config(storage)`."""
    password = make_url(storage).password
    return {PASSWORD_ENV: str(password)} if password else {}


def write_dagster_yaml(home: Path, storage: str) -> Path:
    """Write dagster.yaml into `home`, unless someone replaced ours with their own."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text().startswith(MARKER):
        block = json.dumps(storage_config(storage))  # JSON is YAML: one flow mapping
        config.write_text(DAGSTER_YAML.format(storage=f"    {block[1:-1]}"))
        config.chmod(0o600)
    return config


def ensure_dagster_home() -> Path:
    home = Path(
        os.environ.setdefault(
            "DAGSTER_HOME", str(Path(__file__).resolve().parent.parent / ".dagster_home")
        )
    )
    storage = storage_url()
    if ensure_database(make_url(storage)):
        print(f"created Dagster's storage database {make_url(storage).database}")
    write_dagster_yaml(home, storage)
    os.environ.update(storage_env(storage))  # for Dagster in this process and what it starts
    return home


if __name__ == "__main__":
    # `dagster_home.py dagster dev ...`: prepare the home, then run the command in it with the
    # storage's password in its environment (never on a command line)
    home = ensure_dagster_home()
    print(f"DAGSTER_HOME={home}")
    if len(sys.argv) > 1:
        sys.stdout.flush()
        os.execvp(sys.argv[1], sys.argv[1:])
