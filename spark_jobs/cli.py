"""The `drainer` command: drainer's CLI with the Spark job injected as the run executor.

`drainer.cli` cannot import pyspark (the core stays light and pure), so the one place that
knows the executor is this entry point; it imports the Spark job only when `drainer run`
asks for it, so `--help`, `plan` and `status` never start or import Spark.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from drainer.cli import exit_process, pause_collection, resume_collection
from drainer.cli import main as cli_main

if TYPE_CHECKING:
    from collections.abc import Callable

    from drainer.config import DrainConfig
    from drainer.lifecycle.abandon import CommitFinder
    from drainer.lifecycle.run import Executor
    from drainer.settings import Settings


def spark_executor() -> Executor:
    """The Spark job, imported and started only when a run has records to read.

    A run with nothing to read never calls its executor, so it imports no pyspark and opens no
    Spark session. The first call says on stderr which Spark runs the job
    (`spark: Spark Connect …`).
    """
    said: list[bool] = []

    def execute(ctx: Any) -> Any:
        from spark_jobs.drain_job import execute as run_job
        from spark_jobs.drain_job import which_spark

        if not said:
            # plain print: never wrapped by rich
            print(f"spark: {which_spark(ctx.settings)}", file=sys.stderr)
            said.append(True)
            resume_collection()  # the session is up: pyspark and pandas are imported
        return run_job(ctx)

    return execute


def table_maintainer() -> Callable[..., dict[str, Any]]:
    """The table maintenance job that `drainer maintain` runs on Delta and Iceberg tables."""
    from spark_jobs.table_maintenance import maintain

    return maintain


def commit_finder() -> CommitFinder:
    """The Spark job `plan abandon` runs for a table sink: stop the plan's attempts on the
    server, then look for its commit in the table (spark_jobs.drain_job.find_commit)."""
    from spark_jobs.drain_job import find_commit

    return find_commit


def callable_checker() -> Callable[[DrainConfig, Settings, bool], None]:
    """Imports a drain's processor or handler where its run will (spark_jobs.imports); Spark
    only for a handler of the user's own on a Connect server, and only when `plan` asks."""
    from spark_jobs.imports import check_callables

    return check_callables


def main(argv: list[str] | None = None) -> int:
    return cli_main(
        argv,
        executor=spark_executor,
        maintainer=table_maintainer,
        checker=callable_checker,
        finder=commit_finder,
    )


def entry() -> None:
    """The `drainer` console script (and `python -m spark_jobs.cli`): `main` with the collector
    held off through its imports, then a quick exit."""
    pause_collection()
    exit_process(main())


if __name__ == "__main__":
    entry()
