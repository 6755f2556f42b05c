"""`drainer`: the command line. Same code paths as Dagster, no Dagster needed.

Layout: `main` builds the parser and maps errors to exit codes in one place; one module per
command group (`services`, `produce`, `runs`, `status`, `dlq`); `output` renders every table.

The import rule, once: a command module imports at top level only the standard library,
`drainer.config`, `drainer.errors` and `drainer.cli.output`; everything else (Kafka, Postgres,
Spark) is imported inside the command that needs it. So `drainer --help` is fast, and `plan`
and `status` never import pyspark. Spark is not found by the CLI at all: the executor of
`drainer run` is injected by the entry point (`spark_jobs.cli`), which keeps `drainer` free of
pyspark and Dagster.
"""

from drainer.cli.main import build_parser, exit_process, main, pause_collection, resume_collection

__all__ = [
    "build_parser",
    "exit_process",
    "main",
    "pause_collection",
    "resume_collection",
]
