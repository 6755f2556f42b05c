"""The Kafka sink, Spark side: Spark computes the run's output, one producer sends it in one
Kafka transaction with the run's marker, before the Postgres commit.

Where the Spark server can hold that producer (`server`: a local master started with
drainer's producer jar, `KafkaTxnSink.java` beside this module), the write's tasks produce there and no row crosses to the driver.
Otherwise the driver produces. Roles there: the Spark job computes the output rows and streams
them to the driver as Arrow tables (on Connect: the server's own result stream); a reader thread
converts each table to columns and hands it on through a bounded queue, while the driver's one
transactional producer sends the tables already there. So computing, streaming and producing
overlap, each row is computed once, and driver memory stays bounded by a few tables
(`stream`). The broker's transaction starts with the first record sent, so it spans the job's streaming tail, not its whole run. An attempt after a
failed one computes and caches every row first (the run's stage) and produces from that: a job
too slow to stream within one transaction timeout still completes on its retry. A run of more
than `stream.STAGE_RECORDS` records is staged on disk and streamed in parts: on Connect one
stream is one Spark job, whose results may not pass the server's `spark.driver.maxResultSize`.

A resumed run first fences every older attempt (`init_transactions`) and then looks for its
marker `read_committed`: found, the run is committed in Kafka and is not produced again.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from drainer.config import DrainConfig
from drainer.config.kafka_clients import own_cluster_settings
from drainer.errors import ConfigError
from drainer.kafka.clients import client_config
from drainer.kafka.producer import OutRecord
from drainer.lifecycle.dlq import dlq_record
from drainer.lifecycle.results import RunContext
from drainer.sinks import SinkCommit
from drainer.sinks.kafka import KafkaSink, protocol
from drainer.sinks.kafka.errors import missing_topic, not_compacted
from drainer.sinks.kafka.protocol import RunMarker
from drainer.sinks.kafka.transactions import DeadLetterJoin, RunTransaction
from drainer.sinks.upsert import DELETED_AT, TOMBSTONE, UpsertSpec
from drainer.store import dead_letters, runs
from drainer.store.leases import check_fence
from spark_jobs.session import is_connect
from spark_jobs.sinks.base import SparkSink
from spark_jobs.sinks.kafka.server import produce_on_server, producer_settings, why_not_on_server
from spark_jobs.sinks.kafka.stream import (
    STAGE_RECORDS,
    crash_at_first,
    in_parts,
    numbered_stage,
    out_batches,
    partition_bytes,
    read_ahead,
)
from spark_jobs.sinks.upsert import collapse

SOURCE_COLUMN = "_drainer_source"
_TEXT_OR_BYTES = (StringType, BinaryType)


class KafkaSparkSink(KafkaSink, SparkSink):
    _transaction: RunTransaction | None = None
    _crash_in_spark = False
    _took: dict[str, float] | None = None

    def steps(self) -> dict[str, float]:
        """Seconds of the write's steps: `checks` (the marker and output topics looked up),
        then the server producer's (`produce_on_server`) or the driver's `produce`."""
        return dict(self._took or {})

    def committed(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        """Fence older attempts of the drain, then find the run's marker `read_committed`.

        Asked for resumed runs only (`drain_job`): a first attempt has no marker to find (no
        attempt before it produced, and the nonce is new to this plan) and fences when it
        produces."""
        txn = self._txn(ctx)
        txn.ensure_marker_topic()
        txn.open()  # an older attempt's open transaction is aborted here, for good
        marker = txn.find_marker()
        return None if marker is None else self._commit(marker)

    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> SinkCommit:
        spec = self.state_spec(ctx)
        if spec is not None:
            out = kafka_upserts(out, spec, self.topic)
        return self._produce(ctx, *named_kafka_rows(out))

    def write_records(
        self, spark: SparkSession, ctx: RunContext, df: DataFrame, output_schema: StructType
    ) -> SinkCommit:
        """Record mode: each handler row produced in the run's transaction, naming its record."""
        from spark_jobs.modes import record_mode_rows

        rows = record_mode_rows(ctx, df, output_schema, source_column=SOURCE_COLUMN)
        return self._produce(ctx, *named_kafka_rows(rows))

    def crash_while_writing(self, ctx: RunContext) -> None:
        self._crash_in_spark = True

    def _produce(self, ctx: RunContext, rows: DataFrame, columns: list[str]) -> SinkCommit:
        # a retry stages first (cached on the Spark side; a lost block is recomputed from the
        # same ranges), so its transaction lasts the produce-and-commit step only. So does a
        # classic session: its `toLocalIterator` never reports the read's observation (the
        # run's count then waited forever), the staging count does
        classic = not is_connect(rows.sparkSession)
        on_server = self._on_server(rows, columns)
        # a large run's driver stream is staged too, to go in parts (`stream.in_parts`)
        large = not on_server and sum(ctx.readable_records().values()) > STAGE_RECORDS
        parted = not (classic or on_server) and (large or ctx.attempt > 1)
        staged: DataFrame | None = None
        if parted:
            staged = numbered_stage(rows, on_disk=large)
        elif ctx.attempt > 1 or classic:
            staged = rows.persist()
        sizes: dict[int, int] | None = None
        took = self._took = {}
        try:
            if staged is not None:  # a phase of its own: at 10M, 13 s of a 52 s run
                started = time.monotonic()
                if parted:
                    sizes = partition_bytes(staged)
                else:
                    staged.count()
                took["stage"] = time.monotonic() - started

            def still_ours() -> None:
                with ctx.engine.connect() as conn:
                    check_fence(conn, ctx.lease, shared=True)

            # a first attempt was never asked `committed()`: the marker topic may not exist yet
            started = time.monotonic()
            self._txn(ctx).ensure_marker_topic()
            # checked here for both producers, so both name it alike (no row to name: it is
            # the sink's own topic); a Java producer would wait a minute for it
            if self.topic not in self._txn(ctx).existing_topics():
                raise missing_topic(self.topic)
            tombstones = protocol.tombstones(self.config.write)
            if tombstones:  # only a compacted topic keeps one record per key
                policy = self._txn(ctx).cleanup_policy(self.topic)
                if policy is not None and "compact" not in policy.split(","):
                    raise not_compacted(self.topic, policy)
            took["checks"] = time.monotonic() - started
            source = rows if staged is None else staged
            if on_server:
                marker = produce_on_server(
                    self._txn(ctx),
                    source,
                    self.topic,
                    ctx.attempt,
                    producer_settings(ctx.drain, self.settings.bootstrap_servers),
                    still_ours,
                    self._dead_letters(ctx),
                    self._crash_in_spark,
                    took,
                    tombstones,
                )
                return self._commit(marker, "server")
            # the stream starts now: Spark computes while the producer is fenced in
            if staged is None:
                streamed = out_batches(rows)
            else:
                streamed = out_batches(staged) if sizes is None else in_parts(staged, sizes)
            if self._crash_in_spark:
                streamed = crash_at_first(streamed)
            started = time.monotonic()
            with read_ahead(streamed) as batches:
                marker = self._txn(ctx).produce(
                    batches,
                    self.topic,
                    ctx.attempt,
                    still_ours,
                    self._dead_letters(ctx),
                    tombstones,
                )
            took["produce"] = time.monotonic() - started
        finally:
            if staged is not None:
                staged.unpersist()
        return self._commit(marker, "driver")

    def _on_server(self, rows: DataFrame, columns: list[str]) -> bool:
        """Whether the Spark server produces the run (`producer:`; `server` says when it
        can); `producer: server` where it cannot is a configuration error. `columns`: the
        rows' (`named_kafka_rows`), known here without asking the server again."""
        reason = why_not_on_server(rows.sparkSession, self.config, columns)
        if reason is not None and self.config.producer == "server":
            raise ConfigError(
                f"the Kafka sink says `producer: server`, but {reason}. Set `producer: auto` "
                "(or `driver`) to produce from the driver instead. Nothing was committed"
            )
        return reason is None

    def _dead_letters(self, ctx: RunContext) -> DeadLetterJoin | None:
        """The attempt's dead letters join its transaction (exactly once on the DLQ topic)
        when the drain has a DLQ topic on the sink's own cluster; else the run publishes them
        after its commit, at least once, as for every other sink."""
        if not ctx.drain.dlq_topic or self.config.kafka is not None:
            return None
        max_attempts = ctx.drain.max_attempts

        def records() -> list[OutRecord]:
            with ctx.engine.connect() as conn:
                coming = dead_letters.coming_dead_letters(
                    conn, ctx.drain.name, ctx.run.id, ctx.attempt, max_attempts
                )
            return [dlq_record(r) for r in coming]

        return DeadLetterJoin(ctx.drain.dlq_topic, max_attempts, records)

    def producer_config(self, drain: DrainConfig) -> dict[str, Any]:
        """The producer's settings: the sink's own cluster block, else the drain's `kafka:`
        (one block for both clients) with its `kafka_librdkafka:` extras."""
        if self.config.kafka is None:
            return client_config(drain, self.settings.bootstrap_servers)
        own = own_cluster_settings("sink.kafka", self.config.kafka)
        return client_config(None, str(own.pop("bootstrap.servers")), **own)

    def _txn(self, ctx: RunContext) -> RunTransaction:
        if self._transaction is None:
            with ctx.engine.connect() as conn:
                nonce = runs.run_nonce(conn, ctx.run.id)
            self._transaction = RunTransaction(
                self.producer_config(ctx.drain), ctx.drain.name, ctx.run.id, nonce
            )
        return self._transaction

    def _commit(self, marker: RunMarker, producer: str | None = None) -> SinkCommit:
        assert self._transaction is not None
        return SinkCommit(
            "kafka",
            self.topic,
            id=marker.offset,  # the marker's offset on the marker topic
            rows=sum(marker.produced.values()) - marker.dead_letters,  # the output's records
            bytes=marker.size,
            attempt=marker.attempt,  # its staged failures are the ones the commit counts
            dlq_max_attempts=marker.dlq_max_attempts,
            details={
                "produced": dict(marker.produced),
                "transactional_id": self._transaction.tid,
                # earlier attempts of the run: none committed, each one's transaction (if it
                # opened one) was aborted by the coordinator or fenced by the next attempt
                "aborted_attempts": marker.attempt - 1,
                "attempt": marker.attempt,
                # where the run's transactional producer ran (a resumed run's found marker: none)
                **({"producer": producer} if producer else {}),
            },
        )


def kafka_upserts(out: DataFrame, spec: UpsertSpec, topic: str) -> DataFrame:
    """`write: upsert`: the run's rows collapsed to one per `key` by the table sinks' own rule
    (`collapse`), a delete (a null value, a tombstone read, or `delete_when`) as a null value:
    the record the compacted topic keeps for the key."""
    tomb = F.col("value").isNull()
    if TOMBSTONE in out.columns:
        tomb = tomb | F.coalesce(F.col(TOMBSTONE), F.lit(False))
    newest = collapse(out.withColumn(TOMBSTONE, tomb), spec, f"topic {topic}")
    value = F.when(F.col(DELETED_AT).isNull(), F.col("value"))
    return newest.withColumn("value", value).drop(DELETED_AT)


def kafka_rows(out: DataFrame) -> DataFrame:
    """The output as Spark's Kafka sink schema (`named_kafka_rows`)."""
    return named_kafka_rows(out)[0]


def named_kafka_rows(out: DataFrame) -> tuple[DataFrame, list[str]]:
    """The output as Spark's Kafka sink schema, plus the source record where there is one,
    and its column names (on Connect, asking a DataFrame for them is a round trip).

    A row comes from one record when record mode made it (`_drainer_source`) or when the
    processor kept the source columns `topic`, `partition` and `offset`: those then say where
    it came from, not where it goes (the sink's topic). Otherwise `topic` and `partition`
    route the row as in Spark's Kafka sink.

    Only columns that carry something cross to the driver: a column of nulls costs the server
    its Arrow conversion per row (two of them were ~7% of streaming 1M rows), so an output
    without `headers`, routing or a source leaves that column out.
    """
    fields = {f.name: f.dataType for f in out.schema.fields}
    if "value" not in fields:
        raise ConfigError(
            f"the output has no `value` column (its columns: {', '.join(fields) or 'none'}): "
            "a Kafka sink's rows need `value` (string or binary), optionally `key`, `headers`, "
            "`partition`, `topic`; set it in the processor or handler. Nothing was committed"
        )
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], _TEXT_OR_BYTES):
            raise ConfigError(
                f"output column {name} is {fields[name].simpleString()}: a Kafka sink takes a "
                f"string or binary {name}; cast it (e.g. to_json(...) or .cast('string')) in "
                "the processor or handler. Nothing was committed"
            )
    from_record = "offset" in fields and "topic" in fields and "partition" in fields
    columns: dict[str, Column] = {"value": F.col("value").cast("binary")}
    if "key" in fields:
        columns["key"] = F.col("key").cast("binary")
    if "headers" in fields:
        columns["headers"] = F.col("headers")
    if not from_record:  # routing columns, as in Spark's Kafka sink
        if "partition" in fields:
            columns["partition"] = F.col("partition").cast(IntegerType())
        if "topic" in fields:
            columns["topic"] = F.col("topic").cast("string")
    if SOURCE_COLUMN in fields:
        columns["source"] = F.col(SOURCE_COLUMN).cast("binary")
    elif from_record:
        columns["source"] = F.concat_ws("/", "topic", "partition", "offset").cast("binary")
    return out.select(*(c.alias(name) for name, c in columns.items())), list(columns)
