"""Read exactly a plan's offset ranges from Kafka as a DataFrame (bounded, batch)."""

from __future__ import annotations

import functools
import hmac
import inspect
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, NamedTuple

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from drainer import read_counts
from drainer.config import DrainConfig
from drainer.config.kafka_clients import java_settings
from drainer.level_topics import topic_level
from drainer.local_secrets import KAFKA_GROUP_KEY, ensure_secret
from drainer.store.runs import StoredRange
from spark_jobs.driver_read import driver_read, reads_in_driver
from spark_jobs.session import KAFKA_SOURCE

log = logging.getLogger(__name__)

BOUNDED_FETCH_MAX_WAIT_MS = 10  # `kafka_java: {fetch.max.wait.ms: …}` overrides it
# a dataframe-mode read of more ranges than cores gives each task at least this many records,
# its ranges read one after another: a task's start (~50 ms here, in waves of `cores`) costs
# more than reading fewer. Small reads so run in `cores` tasks (12 ranges of 83 records: a 1.67
# -> 1.39 s Spark job), and many small ranges in few tasks: 192,000 records on 3 x 64
# partitions were 192 tasks, a 7.3 s Spark job against 1.5 s on 3 x 4 (issue 51). 1M records
# on 12 ranges keep their 12 tasks
TASK_RECORDS = 50_000
# Spark's consumer seeks and polls again each time it has handed out a poll's records, and
# Kafka's default returns 500 per poll: 10,000 read 1M records in 0.99 s instead of 1.44 s
# (medians of 6, measured on 2 cores). It bounds a poll's count only:
# the records are already fetched, within `max.partition.fetch.bytes` and `fetch.max.bytes`
BOUNDED_MAX_POLL_RECORDS = 10_000


def read_ranges(
    spark: SparkSession,
    drain: DrainConfig,
    bootstrap: str,
    ranges: list[StoredRange],
    read_from: Mapping[tuple[str, int], int] | None = None,
    cores: int | None = None,
    *,
    home: Path,
    stage: Path | None = None,
) -> DataFrame:
    """`assign` plus numeric starting and ending offsets: Spark reads [start, end) and no more.

    Offsets already done (the offset map) are dropped, so no completed record is redone. The
    `level` column comes from the topic's suffix. A range starts at `read_from` when retention
    deleted its beginning (measured by `drainer.lifecycle.retention_gaps` just before this read); ranges with
    nothing left to read are not read at all.

    Reads are `read_committed` unless the drain's `kafka:` says otherwise: aborted records and
    transaction markers are skipped by the consumer, so offsets inside [start, end) may have no
    record (Spark does not count these gaps as data loss).

    `cores` (dataframe mode: the cores that run the job) sizes the read's tasks. A plan of fewer
    ranges than cores has Spark split a large range into several tasks (Kafka's
    `minPartitions`): each still reads a bounded [start, end) of one partition, and together
    exactly the plan's. A read of more ranges than cores whose ranges are small runs in fewer
    tasks than ranges (`coalesced_tasks`), each reading its ranges one after another. Record
    mode passes no `cores`: a partition's records go through one task, in order, and one task
    per partition. A dataframe read of many small ranges is read by the driver's own consumer
    instead (`spark_jobs.driver_read`), the same records as the same columns, staged as files
    in `stage` (None: Spark does not read this machine's files, and reads them all itself).

    `home` (the run's `Settings.home`) holds the key of the read's group id (`spark_group`).
    """
    read_from = read_from or {}
    records = 0
    assign: dict[str, list[int]] = defaultdict(list)
    starting: dict[str, dict[str, int]] = defaultdict(dict)
    ending: dict[str, dict[str, int]] = defaultdict(dict)
    for rng in ranges:
        start = read_from.get((rng.topic, rng.partition), rng.start)
        if start >= rng.end:
            continue
        assign[rng.topic].append(rng.partition)
        starting[rng.topic][str(rng.partition)] = start
        ending[rng.topic][str(rng.partition)] = rng.end
        records += rng.end - start
    tasks = sum(len(p) for p in assign.values())
    if stage is not None and cores is not None and reads_in_driver(tasks, records, cores):
        bounds = {
            (topic, int(p)): (start, ending[topic][p])
            for topic, starts in starting.items()
            for p, start in starts.items()
        }
        started = time.monotonic()
        read = driver_read(spark, drain, bootstrap, bounds, stage, files=cores)
        if read is not None:
            log.info(
                "%d ranges (%d offsets) read in the driver in %.2f s: many small ranges, which "
                "Spark's source reads one partition at a time (spark_jobs.driver_read)",
                tasks,
                records,
                time.monotonic() - started,
            )
            return _levelled(spark, read, ranges)
        log.info("%d ranges hold records too large for the driver's read: Spark reads them", tasks)
    reader = (
        spark.read.format(KAFKA_SOURCE)  # through its V2 scan (spark_jobs.session.v2_reads)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        # the read starts past what retention deleted before it (drainer.lifecycle.retention_gaps); records
        # deleted while it reads must fail the attempt, not vanish: the next one measures again
        .option("failOnDataLoss", "true")
    )
    # the session redacts secret option values from plan text (spark_jobs.session)
    for key, value in consumer_settings(drain, bootstrap, home).items():
        reader = reader.option(f"kafka.{key}", value)
    if cores is not None and cores > tasks:
        reader = reader.option("minPartitions", str(cores))
    df = reader.load()
    coalesced = coalesced_tasks(tasks, records, cores)
    if coalesced is not None:
        df = df.coalesce(coalesced)
    return _levelled(spark, df, ranges)


def _levelled(spark: SparkSession, df: DataFrame, ranges: list[StoredRange]) -> DataFrame:
    """The read with its `level` column, without the offsets its ranges already did."""
    # the suffix after the topic's last "-" (substring_index stays on Spark's bytes, where
    # split made a Java string and ran a regex per record)
    df = df.withColumn("level", F.substring_index(F.col("topic"), "-", -1).cast("int"))
    done = [
        (rng.topic, rng.partition, offset)
        for rng in ranges
        for offset in sorted(rng.start_progress().done_below(rng.end))
    ]
    if done:
        skip = spark.createDataFrame(done, "topic string, partition int, offset long")
        df = df.join(F.broadcast(skip), ["topic", "partition", "offset"], "left_anti")
    return df


def coalesced_tasks(ranges: int, records: int, cores: int | None) -> int | None:
    """The tasks a dataframe read of `ranges` ranges holding `records` records runs in when
    that is fewer than one per range: at least `cores`, else one per `TASK_RECORDS` records.
    None: one task per range (a plan of no more ranges than cores, or large ranges; record
    mode, which passes no `cores`)."""
    if cores is None or ranges <= cores:
        return None
    tasks = max(cores, -(-records // TASK_RECORDS))
    return tasks if tasks < ranges else None


def consumer_settings(drain: DrainConfig, bootstrap: str, home: Path) -> dict[str, str]:
    """Every setting of the read's Java consumers, its group id last (`spark_group`)."""
    settings = {
        "bootstrap.servers": bootstrap,
        # the ranges hold records already written: a fetch that finds nothing new (Spark's
        # consumer asks once more at a range's end) need not wait the 500 ms default for more
        # to arrive. Measured: 12 ranges of 83 records read in 0.7 s instead of 3.6 s.
        "fetch.max.wait.ms": str(BOUNDED_FETCH_MAX_WAIT_MS),
        "max.poll.records": str(BOUNDED_MAX_POLL_RECORDS),
        # the common `kafka:` block translated for the Java client, plus its `kafka_java:` extras
        **java_settings(drain),
    }
    settings["group.id"] = spark_group(drain, settings, ensure_secret(home, KAFKA_GROUP_KEY))
    return settings


def spark_group(drain: DrainConfig, settings: Mapping[str, str], key: str) -> str:
    """The group id of a drain's Spark reads with these consumer settings.

    Spark pools its executors' consumers by (group id, partition) and makes a new group id per
    query, so every run connected a new consumer per task; one group id per drain lets a run
    reuse the consumers the drain's last run left in the Connect server's pool. The reads
    `assign` partitions and commit nothing, so the group never has members or offsets. Not a
    level's group (`{group}-{level}`), which the mirror commits to.

    A pooled consumer serves only the settings it was made with: a run whose settings changed
    (a `kafka_java:` edit, a rotated password, a new drainer default) under the same group id
    failed every task ("Kafka parameters for same cache key should be equal") until the pool
    evicted the old consumers, after 5 idle minutes, which a drain scheduled more often never
    has. So the id ends with a digest of the settings, keyed with `key` (a secret file of
    drainer's home): the id shows in Spark's plans and UI, and a plain hash of a password there
    would let anyone test guesses of it. Processes of another home use other ids, which costs
    them only the reuse.
    """
    text = json.dumps(sorted(settings.items())).encode()
    return f"{drain.group}-spark-{hmac.new(key.encode(), text, 'sha256').hexdigest()[:12]}"


BytesBy = Literal["partition", "level"] | None


class Read(NamedTuple):
    """What the run read of one (topic, partition): records, and their key+value+header bytes
    (None: not measured, `counted`'s `bytes_by`)."""

    records: int
    bytes: int | None


# what a run read per (topic, partition), once the job that counts it ran
Measure = Callable[[], dict[tuple[str, int], Read]]


def counted(
    df: DataFrame,
    ranges: list[StoredRange],
    recount: bool = True,
    bytes_by: BytesBy = "partition",
    full: Mapping[tuple[str, int], int] | None = None,
) -> tuple[DataFrame, Measure]:
    """The read with its records and bytes counted per (topic, partition) by the job that
    consumes it.

    Offsets are not records (transaction markers, aborted records), and a dataframe-mode
    transform may aggregate, so the commit's `drained` needs the input counted on its own; the
    key+value+header bytes (`record_bytes`) feed record sizes and byte rates (`budget_bytes`,
    `run_seconds`). An observation counts both inside the processing job itself: no second
    read of Kafka (unless Spark pruned the read away, see below; `recount=False` then reports
    nothing instead). Call the returned function after that job's action.

    The records of each (topic, partition) are packed into a few sums (`drainer.read_counts`),
    checked against a plain total. Bytes are summed per partition when `bytes_by` is
    "partition" (a drain with `budget_bytes` plans with each partition's record size), per
    level and shared out over the level's partitions by their records when "level" (issue 30
    measured the per-row cost of the observation at 1M records as ~550 ns with two sums per
    partition), and not at all when None (their sums cost ~70 ns a record, delta_phases).

    `full` (`RunContext.readable_records`: the most records each partition's read can
    return) leaves the packed sums out: when the total is the sum of `full`, every partition
    read all it could, so its count is known (the sums cost ~0.1 s per 1M records, issue 30).
    A read with gaps (transaction markers, aborted or compacted records) is then counted again
    by a second read.
    """
    keys = sorted({(r.topic, r.partition) for r in ranges})
    if not keys:
        return df, dict
    bounds: dict[tuple[str, int], int] = defaultdict(int)
    level_of: dict[tuple[str, int], int] = {}
    for r in ranges:
        bounds[(r.topic, r.partition)] += max(0, r.end - r.start)
        level_of[(r.topic, r.partition)] = r.level
    pack = read_counts.packing(bounds)
    # unique per read: concurrent runs may share one Connect session (spark_jobs.session)
    tag = uuid.uuid4().hex
    observation = Observation(f"drainer_records_read_{tag}")
    # Per row, once: the (topic, partition) as one integer of the level (the topic's suffix,
    # already a column) and the partition, and the record's bytes. The sums below then compare
    # integers instead of the topic string and re-deriving the size in each (issue 17). Both
    # columns are dropped after it; the size only where bytes are counted.
    key_col, size_col = f"_drainer_k_{tag}", f"_drainer_b_{tag}"
    with_key = df.withColumn(key_col, _key_of(F.col("level"), F.col("partition")))
    if bytes_by is not None:
        with_key = with_key.withColumn(size_col, record_bytes())

    def mine(key: tuple[str, int]) -> Column:
        return F.col(key_col) == F.lit(_key(topic_level(key[0]), key[1]))

    metrics = [F.count(F.lit(1)).alias("records")]
    for word in range(0 if full is not None else pack.sums):
        packed: Column | None = None
        for key in (k for k in keys if pack.words[k] == word):
            one = F.lit(1 << pack.shifts[key]).cast("long")
            packed = F.when(mine(key), one) if packed is None else packed.when(mine(key), one)
        assert packed is not None
        metrics.append(F.sum(packed.otherwise(F.lit(0).cast("long"))).alias(f"n{word}"))
    levels = sorted(set(level_of.values()))
    if bytes_by == "partition":
        for i, key in enumerate(keys):
            metrics.append(
                F.sum(F.when(mine(key), F.col(size_col)).otherwise(0)).cast("long").alias(f"b{i}")
            )
    elif bytes_by == "level" and len(levels) == 1:
        metrics.append(F.sum(F.col(size_col)).cast("long").alias(f"l{levels[0]}"))
    elif bytes_by == "level":
        for level in levels:
            in_level = F.col("level") == F.lit(level)
            metrics.append(
                F.sum(F.when(in_level, F.col(size_col)).otherwise(0))
                .cast("long")
                .alias(f"l{level}")
            )
    # dropping a column by a name the frame lacks (no size without bytes) does nothing
    observed = _batch(with_key).observe(observation, *metrics).drop(key_col, size_col)

    def counts() -> dict[tuple[str, int], Read]:
        try:
            found = observation.get
        except Exception as err:  # Connect fails to convert metrics it never collected
            log.debug("the read's observation is missing (%s): counting the read again", err)
            found = {}
        if not found and not recount:
            return {}
        if not found:
            # Spark dropped the observation with the whole read: a processor whose output is
            # empty by construction (`where(lit(False))`) makes the optimizer prune the plan.
            # The ranges are bounded, so a second read counts exactly what the first one read.
            return count_read(df, ranges)
        total = int(found.get("records") or 0)
        if full is not None:
            records = {key: full.get(key, 0) for key in keys}
            if total != sum(records.values()):
                log.info(
                    "the read returned %d of the %d records its offsets hold (transaction "
                    "markers, aborted or compacted records): counting each partition's again",
                    total,
                    sum(records.values()),
                )
                return count_read(df, ranges)
        else:
            records = pack.unpack([int(found.get(f"n{w}") or 0) for w in range(pack.sums)])
        if not read_counts.within_bounds(records, bounds, total):
            # a count past the offsets planned for it (never expected: a read returns at most
            # one record per offset): not trusted, counted again exactly
            log.warning("the read's packed counts %s exceed their bounds: counting again", records)
            return count_read(df, ranges)
        sizes: dict[tuple[str, int], int | None]
        if bytes_by is None:
            sizes = dict.fromkeys(keys)
        elif bytes_by == "partition":
            sizes = {key: int(found.get(f"b{i}") or 0) for i, key in enumerate(keys)}
        else:
            sizes = {}
            for level in levels:
                mine_keys = {k: records[k] for k in keys if level_of[k] == level}
                sizes |= read_counts.apportion(int(found.get(f"l{level}") or 0), mine_keys)
        return {key: Read(records[key], sizes[key]) for key in keys}

    return observed, counts


def counted_rows(
    out: DataFrame, read: DataFrame, ranges: list[StoredRange], full: Mapping[tuple[str, int], int]
) -> tuple[DataFrame, Measure]:
    """`out` (one row per record of `read`: `spark_jobs.row_preserving`) with its rows
    counted by the job that writes it: the read's records, without their bytes.

    An observation above the processor sees rows Spark has made already, where beneath it
    it costs a copy of every record (`spark_jobs.row_preserving`); only the total is taken, so
    `full` (`RunContext.readable_records`) must be known: a total short of it (transaction
    markers, aborted or compacted records) has `read` counted again per partition, as
    `counted` does. Call the returned function after that job's action.
    """
    keys = sorted({(r.topic, r.partition) for r in ranges})
    observation = Observation(f"drainer_rows_written_{uuid.uuid4().hex}")
    observed = _batch(out).observe(observation, F.count(F.lit(1)).alias("records"))

    def counts() -> dict[tuple[str, int], Read]:
        try:
            total = observation.get.get("records")
        except Exception as err:  # Connect fails to convert metrics it never collected
            log.debug("the output's observation is missing (%s): counting the read", err)
            total = None
        if total is None or int(total) != sum(full.get(key, 0) for key in keys):
            log.info("the output's %s rows are not each record of the ranges: counting them", total)
            return count_read(read, ranges)
        return {key: Read(full.get(key, 0), None) for key in keys}

    return observed, counts


def _batch(df: DataFrame) -> DataFrame:
    """`df`, known to be a batch read (`read_ranges` reads bounded ranges, never a stream).

    pyspark's Connect client asks the server whether a DataFrame streams before it attaches an
    observation (`isStreaming`, an AnalyzePlan round trip of the whole read: 0.05-0.12 s of
    every run); the answer is cached on the DataFrame, so it is given here. A classic
    DataFrame's `isStreaming` is a plain property that asks its own JVM: left alone.
    """
    if isinstance(inspect.getattr_static(type(df), "isStreaming", None), functools.cached_property):
        df.__dict__["isStreaming"] = False
    return df


_PARTITIONS = 1 << 31  # a Kafka partition number is an int32


def _key(level: int, partition: int) -> int:
    return level * _PARTITIONS + partition


def _key_of(level: Column, partition: Column) -> Column:
    return level.cast("long") * F.lit(_PARTITIONS) + partition.cast("long")


def record_bytes() -> Column:
    """A record's key, value and header bytes (header keys as UTF-8), what a byte budget
    counts; the planner's Kafka sample counts the same (`drainer.kafka.record_reads`).

    Header bytes are the octet length of all header keys joined, plus that of all values
    joined (a binary cast to string keeps its bytes; nulls are skipped, as 0 bytes): built-in
    expressions Spark compiles. A lambda fold over the headers (`aggregate`) is evaluated
    without generated code and took the whole stage with it: issue 30's profile measured it as
    most of the per-row count's cost (1M records: 1.9 s read, 3.0 s counted with the fold,
    2.0 s counted without it).
    """
    headers = F.col("headers")
    header_keys = F.octet_length(F.array_join(headers.getField("key"), ""))
    header_values = F.octet_length(
        F.array_join(headers.getField("value").cast("array<string>"), "")
    )
    # most records have no headers: joining an empty array still builds a string per record
    # (~90 ns of the count's per-record cost at 1M, issue 30)
    header_bytes = F.when(
        F.size(headers) > 0, F.coalesce(header_keys, F.lit(0)) + F.coalesce(header_values, F.lit(0))
    ).otherwise(F.lit(0))
    return (
        F.coalesce(F.length("key"), F.lit(0))
        + F.coalesce(F.length("value"), F.lit(0))
        + header_bytes
    )


def count_read(df: DataFrame, ranges: list[StoredRange]) -> dict[tuple[str, int], Read]:
    """Records and key+value+header bytes per (topic, partition) of a bounded read, counted by a job
    of its own."""
    keys = sorted({(r.topic, r.partition) for r in ranges})
    size = record_bytes()
    read = (
        df.groupBy("topic", "partition")
        .agg(F.count(F.lit(1)).alias("n"), F.sum(size).cast("long").alias("b"))
        .collect()
    )
    found = {
        (row["topic"], row["partition"]): Read(int(row["n"]), int(row["b"] or 0)) for row in read
    }
    return {key: found.get(key, Read(0, 0)) for key in keys}
