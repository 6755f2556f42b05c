"""Prepare DAGSTER_HOME for local use: persistent runs, and a limit of 1 per concurrency pool.

Each drain's asset sits in its own pool (`drain_<name>`), so the limit means one run of a drain
at a time across the instance, on top of drainer's own Postgres lock.
"""

from __future__ import annotations

import os
from pathlib import Path

DAGSTER_YAML = """\
# written by scripts/dagster_home.py
concurrency:
  pools:
    default_limit: 1
telemetry:
  enabled: false
"""


def ensure_dagster_home() -> Path:
    home = Path(
        os.environ.setdefault(
            "DAGSTER_HOME", str(Path(__file__).resolve().parent.parent / ".dagster_home")
        )
    )
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return home


if __name__ == "__main__":
    print(f"DAGSTER_HOME={ensure_dagster_home()}")
