"""An attempt's Spark operations on the server: named by a tag, held in use, stopped.

A run's attempt tags its Spark operations (`attempt_tag`), so a later attempt stops what a
crashed one left running and Ctrl-C stops its own at once; while they run, the attempt holds the
local Connect server in use, so `drainer services up` does not restart it under them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

from pyspark.sql import SparkSession

from drainer.errors import ServiceUnavailable
from drainer.lifecycle.results import RunContext
from spark_jobs.session import is_connect

log = logging.getLogger(__name__)

T = TypeVar("T")


def holding_server(ctx: RunContext) -> AbstractContextManager[None]:
    """The local Connect server held in use while the run's job runs: `drainer services up`
    does not restart it under the run (drainer.services.connect_users)."""
    settings = ctx.settings
    if settings.spark_remote or not settings.local_spark_connect:
        return nullcontext()
    from drainer.services.connect import ConnectPaths
    from drainer.services.connect_users import using

    label = f"run {ctx.run.id} of drain {ctx.drain.name}"
    return using(ConnectPaths.local(settings).root, label)


def attempt_tag(ctx: RunContext, attempt: int) -> str:
    """Names an attempt's Spark jobs (in the UI, and for spark.interruptTag)."""
    return f"drainer-{ctx.drain.name}-run-{ctx.run.id}-attempt-{attempt}"


def stop_interrupted(spark: SparkSession, tag: str) -> None:
    """Ctrl-C: stop this attempt's operations on the Connect server now, rather than leave
    them to the next attempt (`stop_earlier_attempts`); best effort, the interrupt goes on."""
    if not is_connect(spark):
        return
    try:
        spark.interruptTag(tag)
    except Exception as err:  # the server may be what was slow; the next attempt stops it
        log.debug("could not interrupt %s: %s", tag, err)


def stop_earlier_attempts(ctx: RunContext, spark: SparkSession, wait_s: float = 120.0) -> None:
    """Interrupt what a crashed attempt left running on the Connect server.

    A Connect server keeps executing a client's write after the client died. That frees the
    server's cores for this attempt; it does not decide what lands: a write that finishes anyway
    is skipped by Delta (same txnVersion) or stays on its unpublished Iceberg branch
    (spark_jobs.sinks). Runs share one session per code version, so the earlier attempts'
    tagged operations are found in it.
    """
    if ctx.attempt <= 1 or not is_connect(spark):
        return
    deadline = time.monotonic() + wait_s
    for attempt in range(1, ctx.attempt):
        while spark.interruptTag(attempt_tag(ctx, attempt)):
            log.warning(
                "run %d: interrupted Spark operations left by attempt %d", ctx.run.id, attempt
            )
            if time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"run {ctx.run.id}: attempt {attempt}'s Spark operations on the Connect "
                    f"server did not stop within {wait_s:.0f} s; nothing was committed: rerun"
                )
            time.sleep(1.0)


def at_once(
    spark: SparkSession, calls: Mapping[str, Callable[[], T]], threads: int
) -> dict[str, T]:
    """Each call in a thread of its own (at most `threads` at a time), its Spark operations
    tagged as the caller's are: a session's tags are per thread, and Ctrl-C and a later attempt
    stop an attempt's operations by its tag (`stop_interrupted`, `stop_earlier_attempts`).

    Waits for every call, then raises the first failure in `calls`' order, so that no call
    outlives this one; on Ctrl-C it returns at once (the caller interrupts the tag)."""
    tags = spark.getTags()

    def tagged(call: Callable[[], T]) -> T:
        for tag in tags:
            spark.addTag(tag)
        try:
            return call()
        finally:
            for tag in tags:
                spark.removeTag(tag)

    pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="drainer-at-once")
    try:
        futures = {name: pool.submit(tagged, call) for name, call in calls.items()}
        wait(futures.values())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return {name: future.result() for name, future in futures.items()}
