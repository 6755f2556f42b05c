"""The `drainer` command: drainer's CLI with the Spark job injected as the run executor.

`drainer.cli` cannot import pyspark (the core stays light and pure), so the one place that
knows the executor is this entry point; it imports the Spark job only when `drainer run`
asks for it, so `--help`, `plan` and `status` never start or import Spark.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from drainer.cli import main as cli_main


def spark_executor() -> Callable:
    """The Spark job, after saying on stderr which Spark runs it (`spark: Spark Connect …`)."""
    from spark_jobs.drain_job import execute, which_spark

    print(f"spark: {which_spark()}", file=sys.stderr)  # plain print: never wrapped by rich
    return execute


def table_maintainer() -> Callable:
    """The lakehouse table maintenance job (`drainer table maintain`)."""
    from spark_jobs.lakehouse_maintenance import maintain

    return maintain


def main(argv: list[str] | None = None) -> int:
    return cli_main(argv, executor=spark_executor, maintainer=table_maintainer)


if __name__ == "__main__":
    sys.exit(main())
