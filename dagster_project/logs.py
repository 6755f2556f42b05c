"""The drainer's log lines (plan, Spark start, commit, mirror) in the step's Dagster logs."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from drainer.config.kafka_clients import redact

# pyspark's Spark Connect client logs every gRPC error it raises with the JVM's trace, expected
# ones too (the Delta table lookup before a drain's first write); pyspark keeps that logger
# disabled unless SPARK_CONNECT_LOG_LEVEL is set, but a run on an instance with a dagster.yaml
# re-enables every disabled logger (Dagster's dictConfig, disable_existing_loggers=False)
SPARK_CONNECT_LOGGER = "pyspark.sql.connect.logging"


class _ToDagster(logging.Handler):
    def __init__(self, log: dg.DagsterLogManager) -> None:
        super().__init__(logging.INFO)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log.log(record.levelno, redact(f"{record.name}: {record.getMessage()}"))
        except Exception:  # a log line must never fail the run
            self.handleError(record)


@contextmanager
def drainer_logs_to(log: dg.DagsterLogManager) -> Iterator[None]:
    """Forward records of the `drainer` loggers at INFO and above while the block runs, with
    pyspark's Connect client logger as pyspark configures it."""
    logger = logging.getLogger("drainer")
    handler = _ToDagster(log)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    connect = logging.getLogger(SPARK_CONNECT_LOGGER)
    connect_disabled = connect.disabled
    connect.disabled = "SPARK_CONNECT_LOG_LEVEL" not in os.environ
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        connect.disabled = connect_disabled
