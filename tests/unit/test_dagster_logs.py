"""A drain's step in Dagster: drainer's log lines forwarded, pyspark's Connect client quiet."""

from __future__ import annotations

import logging

from dagster_project.logs import SPARK_CONNECT_LOGGER, drainer_logs_to


class Recorded:
    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []

    def log(self, level: int, message: str) -> None:
        self.lines.append((level, message))


def test_drainer_lines_reach_the_step_log():
    step = Recorded()
    with drainer_logs_to(step):  # a stand-in: the one method it calls
        logging.getLogger("drainer.lifecycle.run").info("planned run %d", 7)
    assert step.lines == [(logging.INFO, "drainer.lifecycle.run: planned run 7")]


def test_the_connect_client_logger_stays_off_as_pyspark_leaves_it(monkeypatch):
    """Dagster's logging setup re-enables it; its gRPC errors (expected ones too) are noise."""
    connect = logging.getLogger(SPARK_CONNECT_LOGGER)
    monkeypatch.setattr(connect, "disabled", False)  # as a run on a dagster.yaml leaves it
    monkeypatch.delenv("SPARK_CONNECT_LOG_LEVEL", raising=False)
    with drainer_logs_to(Recorded()):
        assert connect.disabled
    assert not connect.disabled
    monkeypatch.setenv("SPARK_CONNECT_LOG_LEVEL", "debug")  # asked for: left on
    with drainer_logs_to(Recorded()):
        assert not connect.disabled
