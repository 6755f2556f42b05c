"""What crosses between Airflow and drainer, as plain values: no Airflow import here.

A connection's fields become drainer's variables, a `levels` param becomes the levels to
drain, a run becomes its XCom summary, an error its one line with the exit meaning. Kept pure
so the unit tests check them under every interpreter, with or without Airflow installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from drainer.config.kafka_clients import redact
from drainer.errors import ConfigError, DrainerError
from drainer.lifecycle.results import RunResult

# a `drainer` connection's extra field -> the variable drainer reads it from
# (docs/configuration.md); the database comes from the connection's host, login and password
EXTRA_VARIABLES = {
    "kafka_bootstrap_servers": "KAFKA_BOOTSTRAP_SERVERS",
    "database_url": "DRAINER_DATABASE_URL",
    "spark_remote": "SPARK_REMOTE",
    "spark_master": "SPARK_MASTER",
    "drains_file": "DRAINER_CONFIG",
    "warehouse": "DRAINER_WAREHOUSE",
}

# what each exit code of `drainer run` means, for a failed task's one line
EXIT_MEANINGS = {
    2: "fix what it names; the next run resumes any open plan with the same ranges",
    3: "another run holds the drain; retry later",
}


def connection_variables(
    conn_id: str,
    *,
    host: str | None = None,
    port: int | None = None,
    login: str | None = None,
    password: str | None = None,
    schema: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """drainer's variables from a `drainer` connection: the host, port, login, password and
    schema are its Postgres; the extra's keys (EXTRA_VARIABLES) the other services."""
    found: dict[str, str] = {}
    unknown = sorted(set(extra or {}) - set(EXTRA_VARIABLES))
    if unknown:
        raise ConfigError(
            f"Airflow connection {conn_id}: unknown extra field(s) {unknown}; a drainer "
            f"connection's extra takes {sorted(EXTRA_VARIABLES)}"
        )
    for key, value in (extra or {}).items():
        if value not in (None, ""):
            found[EXTRA_VARIABLES[key]] = str(value)
    if host:
        if "DRAINER_DATABASE_URL" in found:
            raise ConfigError(
                f"Airflow connection {conn_id} names its database twice (host and extra "
                "database_url): keep one"
            )
        user = quote(login or "", safe="")
        secret = f":{quote(password, safe='')}" if password else ""
        at = f"{user}{secret}@" if user or secret else ""
        found["DRAINER_DATABASE_URL"] = (
            f"postgresql+psycopg://{at}{host}:{port or 5432}/{schema or 'drainer'}"
        )
    return found


def requested_levels(value: Any, drain: str, levels: int) -> list[int] | None:
    """The `levels` param (a list of levels, or a text like "0,2"); empty or None: all."""
    if value in (None, "", []):
        return None
    items = value.split(",") if isinstance(value, str) else value
    try:
        chosen = sorted({int(item) for item in items})
    except (TypeError, ValueError):
        raise ConfigError(
            f"drain {drain}: levels {value!r} is not a list of levels; pass e.g. "
            '{"levels": [0, 2]}, or [] for all'
        ) from None
    wrong = [level for level in chosen if not 0 <= level < levels]
    if wrong:
        raise ConfigError(
            f"drain {drain}: levels {wrong} do not exist (it has levels 0..{levels - 1}); "
            "pass levels in that range, or [] for all"
        )
    return chosen


def launch_key(dag_id: str, run_id: str) -> str:
    """One key per Airflow DAG run: a retried task reports what an earlier try committed."""
    return f"airflow-run:{dag_id}:{run_id}"


def run_summary(result: RunResult) -> dict[str, Any]:
    """The XCom value of a drain task: JSON, small, the numbers a downstream task reads."""
    summary: dict[str, Any] = {
        "drain": result.drain,
        "run_id": result.run_id,
        "drained": result.drained,
        "levels": {
            str(lv.level): {
                "records": lv.drained,
                "bytes": lv.read_bytes,
                "planned": lv.planned,
                "backlog_after": lv.backlog_after,
                "dead_lettered": lv.dead_lettered,
            }
            for lv in sorted(result.levels, key=lambda lv: lv.level)
        },
        "backlog_after": sum(lv.backlog_after for lv in result.levels),
        "resumed": result.resumed,
        "shared": result.shared,
        "duration_s": round(result.duration_s or 0.0, 3),
        "published_rows": result.published_rows,
        "sink_commit": result.table_commit or None,
        "upsert": result.upsert or None,
        "table_rows": result.table_rows or None,
        "warnings": list(result.warnings),
    }
    if result.finished is not None:
        summary["finished_first"] = run_summary(result.finished)
    return summary


def run_line(result: RunResult) -> str:
    """The line `drainer run` prints under its table."""
    return (
        f"run {result.run_id} of {result.drain}{' (resumed)' if result.resumed else ''}: "
        f"{result.drained:,} records in {result.duration_s or 0.0:.1f} s; "
        f"{result.published_rows:,} sink rows published"
    )


def failure_line(err: DrainerError, secrets: list[str] | None = None) -> str:
    """A failed task's one line: drainer's message, its exit code and what that means; the
    secrets drainer knows and `secrets` (a connection's password) blanked out."""
    code = err.exit_code
    meaning = EXIT_MEANINGS.get(code, EXIT_MEANINGS[2])
    line = redact(f"drainer: {err} (exit {code}: {meaning})")
    return redact(line, secrets) if secrets else line
