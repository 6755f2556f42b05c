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


def test_a_secret_in_a_line_is_redacted_before_dagster_stores_it(monkeypatch, tmp_path):
    """Dagster keeps step logs in its event log (Postgres): the database password and the
    local Connect token never reach it, written as they are or percent-encoded."""
    home = tmp_path / "home"
    (home / "secrets").mkdir(parents=True)
    (home / "secrets" / "spark-connect.token").write_text("tok-0123456789abcdef\n")
    monkeypatch.setenv("DRAINER_HOME", str(home))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:p%40ss-word-9@db:5432/drains")
    step = Recorded()
    with drainer_logs_to(step):
        logging.getLogger("drainer.store").warning(
            "cannot reach postgresql://ops:p%%40ss-word-9@db (p@ss-word-9), token %s",
            "tok-0123456789abcdef",
        )
    ((_, line),) = step.lines
    assert line == "drainer.store: cannot reach postgresql://ops:***@db (***), token ***"


def test_an_error_leaves_the_resource_redacted_with_its_causes(monkeypatch, tmp_path):
    """Dagster stores a step's error with the messages of its causes: each reaches it redacted,
    the chain itself cut (`from None`), so no unredacted message travels along."""
    import pytest

    from dagster_project.resources import DrainerResource
    from drainer.errors import RedactedError

    monkeypatch.setenv("DRAINER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:p%40ss-word-9@db:5432/drains")
    with pytest.raises(RedactedError) as info, DrainerResource().redacted_errors():
        try:
            raise RuntimeError("cannot reach postgresql://ops:p%40ss-word-9@db")
        except RuntimeError as err:
            raise ValueError("processor failed: p@ss-word-9") from err
    assert str(info.value) == (
        "ValueError: processor failed: ***\n"
        "caused by RuntimeError: cannot reach postgresql://ops:***@db"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "test_an_error_leaves" in info.traceback[-1].name  # the original's frames
