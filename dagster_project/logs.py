"""The drainer's log lines (plan, Spark start, commit, mirror) in the step's Dagster logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg


class _ToDagster(logging.Handler):
    def __init__(self, log: dg.DagsterLogManager) -> None:
        super().__init__(logging.INFO)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log.log(record.levelno, f"{record.name}: {record.getMessage()}")
        except Exception:  # a log line must never fail the run
            self.handleError(record)


@contextmanager
def drainer_logs_to(log: dg.DagsterLogManager) -> Iterator[None]:
    """Forward records of the `drainer` loggers at INFO and above while the block runs."""
    logger = logging.getLogger("drainer")
    handler = _ToDagster(log)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
