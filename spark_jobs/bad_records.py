"""Records whose value does not decode (`bad_records`): never written, never silently dropped.

`fail` (the default): the write's own Spark job raises on the first bad record, naming its
topic, partition and offset, so nothing is written and nothing committed (`known_bad_record`
turns Spark's error back into that one line). `dead_letter`: the bad records, raw key, value
and headers included, are staged as the run's failures before the write, and the commit moves
them to the dead letters at once (an attempt more could not decode them either); the write
leaves them out.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from drainer.config.kafka_clients import redact
from drainer.errors import BadRecord
from drainer.lifecycle.results import RunContext
from drainer.processing.headers import encode_headers
from drainer.store import dead_letters
from drainer.store.leases import check_fence
from spark_jobs.decode import (
    BARRIER,
    ERROR,
    QUICK_ERROR,
    RAW_COLUMNS,
    RAW_HEADERS,
    RAW_KEY,
    RAW_TIMESTAMP,
    RAW_VALUE,
    barrier,
)
from spark_jobs.decode_errors import UNTOLD

log = logging.getLogger(__name__)
_PREFIX = "drainer bad record "
_RAISED = re.compile(re.escape(_PREFIX) + r"([^\s\[]+)\[(\d+)\]@(\d+): ([^\n\"]*)")
# Spark ends its error's message with the error class's SQL state (`raise_error`: P0001): not
# part of the reason
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")


def guarded(decoded: DataFrame, mode: str) -> DataFrame:
    """The decoded rows the sink gets: without `ERROR` and the raw columns; a bad record
    fails the job (`fail`) or is left out (`dead_letter`, staged by `stage_bad_records`).
    Both test `QUICK_ERROR`, which Spark evaluates in the stage's generated code: a JSON
    record's reason is then read again by `known_bad_record`."""
    error = F.col(QUICK_ERROR)
    if mode == "dead_letter":
        kept = decoded.where(error.isNull() & barrier())
    else:
        message = F.concat(
            F.lit(_PREFIX),
            F.col("_topic"),
            F.lit("["),
            F.col("_partition").cast("string"),
            F.lit("]@"),
            F.col("_offset").cast("string"),
            F.lit(": "),
            error,
        )
        kept = decoded.where(F.when(error.isNotNull(), F.raise_error(message)).otherwise(barrier()))
    return kept.drop(ERROR, QUICK_ERROR, *RAW_COLUMNS, BARRIER)


# reads the record at (topic, partition, offset) again: why it does not decode (`ERROR`)
ReasonOf = Callable[[str, int, int], "str | None"]


def known_bad_record(
    err: BaseException, drain: str, run_id: int, reason_of: ReasonOf | None = None
) -> BadRecord | None:
    """A Spark error raised by `guarded` as one line naming the record; else None. A JSON
    record's reason, untold in the job (`decode.QUICK_ERROR`), is `reason_of` it."""
    found = _RAISED.search(str(err))
    if found is None:
        return None
    topic, partition, offset, why = found.groups()
    why = _SQLSTATE.sub("", why)
    if why.startswith(UNTOLD) and reason_of is not None:
        why = _told(reason_of, topic, int(partition), int(offset)) or why
    return BadRecord(
        redact(
            f"record {topic}[{partition}]@{offset} does not decode ({why.strip()}); run "
            f"{run_id} of drain '{drain}' committed nothing and stays open: fix the producer "
            "or the drain's `value` schema and run again, or set `bad_records: dead_letter` "
            "to keep such records in the dead letters and go on"
        )
    )


def _told(reason_of: ReasonOf, topic: str, partition: int, offset: int) -> str | None:
    """The record's reason read again, or None (the record is gone, or Spark with it): the
    run fails on the record either way, and says so with the reason it has."""
    try:
        return reason_of(topic, partition, offset)
    except Exception as err:  # noqa: BLE001 - the bad record is the error to report
        log.warning(
            "the reason of bad record %s[%d]@%d was not read: %s", topic, partition, offset, err
        )
        return None


def stage_bad_records(ctx: RunContext, decoded: DataFrame, attempt: int) -> int:
    """Stage the run's bad records as failures of `attempt` (the one whose write lands or
    landed), replacing the bad records staged for it before; returns how many. One Spark job
    that brings only the bad records to the driver."""
    rows = (
        decoded.where(F.col(QUICK_ERROR).isNotNull() & barrier())
        .select(
            "_topic", "_partition", "_offset", RAW_KEY, RAW_VALUE, RAW_HEADERS, RAW_TIMESTAMP, ERROR
        )
        .collect()
    )
    by_partition: dict[tuple[str, int], list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        ts = row[RAW_TIMESTAMP]
        by_partition[(row["_topic"], row["_partition"])].append(
            (
                row["_offset"],
                False,  # held back: no, failed
                row[RAW_KEY],
                row[RAW_VALUE],
                encode_headers((h["key"], h["value"]) for h in row[RAW_HEADERS] or ()),
                ts.astimezone() if isinstance(ts, datetime) and ts.tzinfo is None else ts,
                dead_letters.UNDECODABLE + row[ERROR],
            )
        )
    with ctx.engine.begin() as conn:
        check_fence(conn, ctx.lease, shared=True)
        dead_letters.clear_undecodable(conn, ctx.run.id, attempt)
        driver = conn.connection.driver_connection
        for (topic, partition), failures in by_partition.items():
            dead_letters.stage_failures(driver, ctx.run.id, topic, partition, failures, attempt)
    return len(rows)
