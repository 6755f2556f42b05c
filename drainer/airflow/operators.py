"""`DrainOperator` (one drain run) and `MaintainOperator` (a drain's daily upkeep).

Thin: each builds the run's settings with DrainerHook, calls the function the CLI and Dagster
call, and turns the outcome into Airflow's terms (an XCom value, a failed task with one line).

A retry is safe: the task's launch key is its DAG run's, so a retry after a committed try
reports that run instead of draining again, and a retry after a crash resumes the open plan
with the same ranges (`drainer.lifecycle.run.drain_once`). The drain's Postgres lease is the
one the CLI and Dagster take: an Airflow run and a Dagster run of one drain wait for each other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from drainer.airflow.hook import DrainerHook
from drainer.airflow.values import failure_line, launch_key, requested_levels, run_line, run_summary
from drainer.config import get_drain
from drainer.config.kafka_clients import redact, redacted_error
from drainer.errors import ConfigError, DrainerError

# an hour, as the Dagster resource waits: a run takes minutes; longer is stuck behind a stuck run
DEFAULT_WAIT_S = 3600.0
MAINTENANCE_WAIT_S = 600.0


@contextmanager
def drainer_errors(hook: DrainerHook) -> Iterator[None]:
    """A drainer error fails the task with its one line: a ConfigError without retries (the
    file or the param needs a fix first), any other with Airflow's retries (a service back, a
    lease freed, a resumed plan). Anything else keeps its traceback, redacted."""
    try:
        yield
    except ConfigError as err:
        raise AirflowFailException(failure_line(err, hook.secrets)) from None
    except DrainerError as err:
        raise AirflowException(failure_line(err, hook.secrets)) from None
    except Exception as err:
        raise redacted_error(err).with_traceback(err.__traceback__) from None


@contextmanager
def drainer_logs_at_info() -> Iterator[None]:
    """drainer's INFO lines (plan, commit, mirror, a wait for the lease) in the task log."""
    logger = logging.getLogger("drainer")
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.setLevel(level)


class DrainOperator(BaseOperator):
    """One run of `drain`: `levels` (None: the DAG run's `levels` param; empty: all levels).

    Pushes the run summary (`drainer.airflow.values.run_summary`) as the task's XCom value.
    """

    template_fields: Sequence[str] = ("levels",)
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        drain: str,
        levels: list[int] | str | None = None,
        drains_file: str | Path | None = None,
        drainer_conn_id: str = DrainerHook.default_conn_name,
        wait_seconds: float = DEFAULT_WAIT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.drain = drain
        self.levels = levels
        self.drains_file = str(drains_file) if drains_file is not None else None
        self.drainer_conn_id = drainer_conn_id
        self.wait_seconds = wait_seconds

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs import drain_job  # pyspark: only where a run happens, not at parse time

        hook = DrainerHook(self.drainer_conn_id, self.drains_file)
        with drainer_errors(hook), drainer_logs_at_info():
            settings = hook.settings()
            drain = get_drain(self.drain, settings.config_path)
            asked = self.levels if self.levels is not None else context["params"].get("levels")
            levels = requested_levels(asked, drain.name, drain.levels)
            dag_run = context["dag_run"]
            self.log.info(
                "drain %s: levels %s (DAG run %s, try %s)",
                drain.name,
                levels if levels is not None else "all",
                dag_run.run_id,
                context["ti"].try_number,
            )
            result = drain_job.run(
                drain,
                levels=levels,
                trigger="airflow",
                wait_s=self.wait_seconds,
                launch_key=launch_key(dag_run.dag_id, dag_run.run_id),
                settings=settings,
            )
        if result.finished is not None:
            self.log.info(
                "open plan of other levels, finished first: %s", run_line(result.finished)
            )
        self.log.info("%s", run_line(result))
        for warning in result.warnings:
            self.log.warning("%s", redact(warning))
        return run_summary(result)


class MaintainOperator(BaseOperator):
    """`drainer maintain <drain>`: fold its sink's partitions, prune its history and, for a
    Delta or Iceberg table, compact and expire what is older than 7 days; under the drain's
    lease (it waits up to `wait_seconds` for a run in progress)."""

    ui_color = "#f1f1f1"

    def __init__(
        self,
        *,
        drain: str,
        drains_file: str | Path | None = None,
        drainer_conn_id: str = DrainerHook.default_conn_name,
        wait_seconds: float = MAINTENANCE_WAIT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.drain = drain
        self.drains_file = str(drains_file) if drains_file is not None else None
        self.drainer_conn_id = drainer_conn_id
        self.wait_seconds = wait_seconds

    def execute(self, context: Any) -> dict[str, Any]:
        from drainer.lifecycle.upkeep import maintain_drain
        from spark_jobs.table_maintenance import maintain

        hook = DrainerHook(self.drainer_conn_id, self.drains_file)
        with drainer_errors(hook), drainer_logs_at_info():
            settings = hook.settings()
            drain = get_drain(self.drain, settings.config_path)

            def table(d: Any, keep_hours: float | None) -> dict[str, Any]:
                return maintain(d, keep_hours=keep_hours, settings=settings)

            upkeep = maintain_drain(drain, wait_s=self.wait_seconds, table=table, settings=settings)
        done: dict[str, Any] = {
            "partitions_before": upkeep.sink.before,
            "partitions_after": upkeep.sink.after,
            "folds": upkeep.sink.folds,
            "runs_pruned": upkeep.history.runs,
        }
        if upkeep.table is not None:
            done["table"] = upkeep.table
        self.log.info("maintained %s: %s", drain.name, done)
        return done
