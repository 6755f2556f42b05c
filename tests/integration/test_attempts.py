"""An attempt's Spark operations on the real Connect server, written from several threads at once
(`spark_jobs.attempts.at_once`, how a routed run writes its tables): each thread carries the
attempt's tag, so the tag that Ctrl-C and a later attempt interrupt reaches them all.

Not tested here: interrupting a job that never ends. A Connect interrupt that lands as the
operation starts its job can leave the job's tasks running (seen here: `max(id)` over 10^13 rows
ran on after its operation was reported interrupted), which would hold a shared server's cores."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from spark_jobs.attempts import at_once

pytestmark = pytest.mark.slow


def _tagged(spark, prefix: str) -> str:
    tag = f"{prefix}-{uuid.uuid4().hex[:8]}"
    spark.addTag(tag)
    return tag


def test_calls_run_at_once_each_carrying_the_callers_tags(spark):
    tag = _tagged(spark, "drainer-test-at-once")
    together = threading.Barrier(3, timeout=60)  # every call in flight at once, or it breaks

    def call(n: int) -> tuple[set[str], int]:
        together.wait()
        return set(spark.getTags()), spark.range(n).count()

    try:
        done = at_once(spark, {f"t{n}": lambda n=n: call(n) for n in (1, 2, 3)}, threads=3)
    finally:
        spark.removeTag(tag)
    assert done == {"t1": ({tag}, 1), "t2": ({tag}, 2), "t3": ({tag}, 3)}
    assert tag not in spark.getTags()


def test_every_call_finishes_before_the_first_failure_is_raised(spark):
    finished: list[str] = []

    def fails() -> None:
        raise ValueError("the first failure")

    def slow() -> None:
        time.sleep(1)
        finished.append("slow")

    with pytest.raises(ValueError, match="the first failure"):
        at_once(spark, {"a": fails, "b": slow}, threads=2)
    assert finished == ["slow"]  # none outlives at_once: the next attempt starts on a quiet table
