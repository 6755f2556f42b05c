"""Prepare DAGSTER_HOME for local use: persistent runs, one run at a time per drain's pool.

Each drain's asset sits in its own pool (`drain_<name>`), and every pool is limited to one run
(`granularity: run`: the run queue holds a second run of the drain until the first ends, rather
than starting its process to wait inside a step). So one run of a drain at a time across the
instance, on top of drainer's own Postgres lock; the runs a backfill splits into run one after
another, and the first drains the whole backfill (dagster_project/launches.py).
The integration tests start their webserver and daemon on a home written by this same function.
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = "# written by scripts/dagster_home.py"
DAGSTER_YAML = f"""\
{MARKER}
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


def write_dagster_yaml(home: Path) -> Path:
    """Write dagster.yaml into `home`, unless someone replaced ours with their own."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text().startswith(MARKER):
        config.write_text(DAGSTER_YAML)
    return config


def ensure_dagster_home() -> Path:
    home = Path(
        os.environ.setdefault(
            "DAGSTER_HOME", str(Path(__file__).resolve().parent.parent / ".dagster_home")
        )
    )
    write_dagster_yaml(home)
    return home


if __name__ == "__main__":
    print(f"DAGSTER_HOME={ensure_dagster_home()}")
