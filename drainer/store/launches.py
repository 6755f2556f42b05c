"""Launch keys: several launches that must end as one drainer run (docs/dagster.md).

An orchestrator may split one request into several launches (Dagster's single-run backfill
policy makes one run per contiguous range of partitions, so a backfill of levels {0, 2} becomes
two runs). Each launch calls `drain_once` with the request's full set of levels and the same
launch key; the first to take the drain's lease plans and drains them all, and records the key
on its run (unique per drain); the others find that run under the lease and report it instead
of draining. The key is stored only on the run it names, so a crash leaves either an open plan
carrying the key (resumed by the next launch) or nothing. An abandoned run keeps its key for the
audit but does not hold it: the next launch under that key plans anew.

Also each run's phase timings (plan, Spark start, Spark job, commit, mirror).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text


def run_for_launch(conn: Connection, drain: str, launch_key: str) -> tuple[int, str] | None:
    """(run id, status) of the run that holds this launch key (abandoned runs do not), if any."""
    row = conn.execute(
        text(
            "SELECT id, status FROM runs WHERE drain = :d AND launch_key = :k "
            "AND status <> 'abandoned'"
        ),
        {"d": drain, "k": launch_key},
    ).first()
    return None if row is None else (row.id, row.status)


def launch_key_of(conn: Connection, run_id: int) -> str | None:
    key = conn.scalar(text("SELECT launch_key FROM runs WHERE id = :r"), {"r": run_id})
    return None if key is None else str(key)


def claim(conn: Connection, run_id: int, launch_key: str) -> None:
    """Name `run_id` the run of `launch_key` (only a run without a key may be claimed)."""
    conn.execute(
        text("UPDATE runs SET launch_key = :k WHERE id = :r AND launch_key IS NULL"),
        {"k": launch_key, "r": run_id},
    )


def store_phases(conn: Connection, run_id: int, phases: dict[str, float]) -> None:
    conn.execute(
        text("UPDATE runs SET phases = CAST(:p AS jsonb) WHERE id = :r"),
        {"p": json.dumps({k: round(v, 3) for k, v in phases.items()}), "r": run_id},
    )


def load_phases(conn: Connection, run_id: int) -> dict[str, float]:
    found = conn.scalar(text("SELECT phases FROM runs WHERE id = :r"), {"r": run_id})
    return dict(found or {})


def run_summary(conn: Connection, run_id: int) -> dict[str, Any]:
    """What a later report of a committed run needs: trigger, duration, Dagster run id, the
    rows it published."""
    row = conn.execute(
        text(
            "SELECT status, trigger, duration_s, dagster_run_id, attempts, published_rows "
            "FROM runs WHERE id = :r"
        ),
        {"r": run_id},
    ).one()
    return dict(row._mapping)
