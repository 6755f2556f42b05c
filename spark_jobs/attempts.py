"""An attempt's Spark operations on the server: named by a tag, held in use, stopped.

A run's attempt tags its Spark operations (`attempt_tag`), so a later attempt stops what a
crashed one left running and Ctrl-C stops its own at once; while they run, the attempt holds the
local Connect server in use, so `drainer services up` does not restart it under them.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager, nullcontext

from pyspark.sql import SparkSession

from drainer.errors import ServiceUnavailable
from drainer.lifecycle.results import RunContext
from spark_jobs.session import is_connect

log = logging.getLogger(__name__)


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
