"""The Kafka sink, Spark side: Spark computes the run's output, one producer sends it in one
Kafka transaction with the run's marker, before the Postgres commit.

Where the Spark server can hold that producer (`kafka_server`: a local master started with
drainer's producer jar), the write's tasks produce there and no row crosses to the driver.
Otherwise the driver produces. Roles there: the Spark job computes the output rows and streams
them to the driver as Arrow tables (on Connect: the server's own result stream); a reader thread
converts each table to columns and hands it on through a bounded queue, while the driver's one
transactional producer sends the tables already there. So computing, streaming and producing
overlap, each row is computed once, and driver memory stays bounded by a few tables. The broker's transaction starts with the
first record sent, so it spans the job's streaming tail, not its whole run. An attempt after a
failed one computes and caches every row first (the run's stage) and produces from that: a job
too slow to stream within one transaction timeout still completes on its retry.

A resumed run first fences every older attempt (`init_transactions`) and then looks for its
marker `read_committed`: found, the run is committed in Kafka and is not produced again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from drainer import faults
from drainer.config import DrainConfig
from drainer.config.kafka_clients import own_cluster_settings
from drainer.errors import ConfigError
from drainer.kafka.clients import client_config
from drainer.kafka.producer import OutRecord
from drainer.kafka.transactions import DeadLetterJoin, OutBatch, RunMarker, RunTransaction
from drainer.lifecycle.dlq import dlq_record
from drainer.lifecycle.results import RunContext
from drainer.sinks import TableCommit
from drainer.sinks.kafka import KafkaSink
from drainer.store import dead_letters, runs
from drainer.store.leases import check_fence
from spark_jobs.session import is_connect
from spark_jobs.sinks.base import SparkSink
from spark_jobs.sinks.kafka_server import produce_on_server, producer_settings, why_not_on_server

SOURCE_COLUMN = "_drainer_source"
_TEXT_OR_BYTES = (StringType, BinaryType)


class KafkaSparkSink(KafkaSink, SparkSink):
    _transaction: RunTransaction | None = None
    _crash_in_spark = False

    def committed(self, spark: SparkSession, ctx: RunContext) -> TableCommit | None:
        """Fence older attempts of the drain, then find the run's marker `read_committed`.

        Asked for resumed runs only (`drain_job`): a first attempt has no marker to find (no
        attempt before it produced, and the nonce is new to this plan) and fences when it
        produces."""
        txn = self._txn(ctx)
        txn.ensure_marker_topic()
        txn.open()  # an older attempt's open transaction is aborted here, for good
        marker = txn.find_marker()
        return None if marker is None else self._commit(marker)

    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> TableCommit:
        return self._produce(ctx, kafka_rows(out))

    def write_records(
        self, spark: SparkSession, ctx: RunContext, df: DataFrame, output_schema: StructType
    ) -> TableCommit:
        """Record mode: each handler row produced in the run's transaction, naming its record."""
        from spark_jobs.modes import record_mode_rows

        rows = record_mode_rows(ctx, df, output_schema, source_column=SOURCE_COLUMN)
        return self._produce(ctx, kafka_rows(rows))

    def crash_while_writing(self, ctx: RunContext) -> None:
        self._crash_in_spark = True

    def _produce(self, ctx: RunContext, rows: DataFrame) -> TableCommit:
        # a retry stages first (cached on the Spark side; a lost block is recomputed from the
        # same ranges), so its transaction lasts the produce-and-commit step only. So does a
        # classic session: its `toLocalIterator` never reports the read's observation (the
        # run's count then waited forever), the staging count does
        classic = not is_connect(rows.sparkSession)
        staged = rows.persist() if ctx.attempt > 1 or classic else None
        try:
            if staged is not None:
                staged.count()

            def still_ours() -> None:
                with ctx.engine.connect() as conn:
                    check_fence(conn, ctx.lease, shared=True)

            # a first attempt was never asked `committed()`: the marker topic may not exist yet
            self._txn(ctx).ensure_marker_topic()
            source = rows if staged is None else staged
            if self._on_server(source):
                marker = produce_on_server(
                    self._txn(ctx),
                    source,
                    self.topic,
                    ctx.attempt,
                    producer_settings(ctx.drain, self.settings.bootstrap_servers),
                    still_ours,
                    self._dead_letters(ctx),
                    self._crash_in_spark,
                )
                return self._commit(marker, "server")
            # the stream starts now: Spark computes while the producer is fenced in
            streamed = _out_batches(rows if staged is None else staged)
            if self._crash_in_spark:
                streamed = _crash_at_first(streamed)
            with read_ahead(streamed) as batches:
                marker = self._txn(ctx).produce(
                    batches, self.topic, ctx.attempt, still_ours, self._dead_letters(ctx)
                )
        finally:
            if staged is not None:
                staged.unpersist()
        return self._commit(marker, "driver")

    def _on_server(self, rows: DataFrame) -> bool:
        """Whether the Spark server produces the run (`producer:`; kafka_server says when it
        can); `producer: server` where it cannot is a configuration error."""
        reason = why_not_on_server(rows.sparkSession, self.config, rows.columns)
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

    def _commit(self, marker: RunMarker, producer: str | None = None) -> TableCommit:
        assert self._transaction is not None
        return TableCommit(
            "kafka",
            self.topic,
            marker.offset,  # the marker's offset on the marker topic
            len(marker.produced),
            marker.size,
            sum(marker.produced.values()) - marker.dead_letters,  # the output's records
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


def kafka_rows(out: DataFrame) -> DataFrame:
    """The output as Spark's Kafka sink schema, plus the source record where there is one.

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
    columns = [F.col("value").cast("binary").alias("value")]
    if "key" in fields:
        columns.append(F.col("key").cast("binary").alias("key"))
    if "headers" in fields:
        columns.append(F.col("headers").alias("headers"))
    if not from_record:  # routing columns, as in Spark's Kafka sink
        if "partition" in fields:
            columns.append(F.col("partition").cast(IntegerType()).alias("partition"))
        if "topic" in fields:
            columns.append(F.col("topic").cast("string").alias("topic"))
    if SOURCE_COLUMN in fields:
        columns.append(F.col(SOURCE_COLUMN).cast("binary").alias("source"))
    elif from_record:
        columns.append(
            F.concat_ws("/", "topic", "partition", "offset").cast("binary").alias("source")
        )
    return out.select(*columns)


READ_AHEAD = 4  # Arrow tables between the stream and the producer (Connect's are <= 4 MB)
JOIN_S = 2.0  # what leaving `read_ahead` waits for its reader thread
CHUNK_ROWS = 10_000  # rows per batch off a classic session's iterator


@contextmanager
def read_ahead(
    batches: Iterator[OutBatch], depth: int = READ_AHEAD
) -> Iterator[Iterator[OutBatch]]:
    """`batches` read by a thread of their own, up to `depth` ahead of the consumer: the Spark
    stream and its conversion overlap the producer. An error of the stream reaches the consumer
    in order; a consumer that stops early stops the reader."""
    ahead: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(("batch", batch)):
                    return
        except BaseException as err:  # handed to the consumer, raised there
            put(("error", err))
            return
        put(("end", None))

    reader = threading.Thread(target=read, daemon=True, name="drainer-kafka-stream")
    reader.start()

    def consume() -> Iterator[OutBatch]:
        while True:
            kind, item = ahead.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        # ended at once unless it waits on the stream for its next table: bounded, so an
        # error of the run is never held up by a server that no longer sends
        reader.join(timeout=JOIN_S)


def _out_batches(rows: DataFrame) -> Iterator[OutBatch]:
    """The output rows as column batches, streamed one Arrow table (or chunk) at a time.

    On Spark Connect the rows arrive as the Arrow tables the server streams, converted column
    by column; elsewhere as Rows from `toLocalIterator`, in chunks.
    """
    tables = _arrow_stream(rows)
    if tables is None:
        chunk: list[Any] = []
        for row in rows.toLocalIterator():
            chunk.append(row)
            if len(chunk) >= CHUNK_ROWS:
                yield _rows_batch(chunk)
                chunk = []
        if chunk:
            yield _rows_batch(chunk)
        return
    for table in tables:
        if table.num_rows:
            yield _arrow_batch(table)


def _arrow_batch(table: pa.Table) -> OutBatch:
    names = set(table.column_names)

    def column(name: str) -> list[Any] | None:
        if name not in names:
            return None
        col = table.column(name)
        return None if col.null_count == len(col) else col.to_pylist()

    values = table.column("value")
    size = sum(
        pc.sum(pc.binary_length(table.column(name))).as_py() or 0
        for name in ("value", "key")
        if name in names
    )
    headers = None
    if "headers" in names:
        col = table.column("headers")
        if col.null_count < len(col) and pc.sum(pc.list_value_length(col)).as_py():
            headers = [_headers(h) for h in col.to_pylist()]
    return OutBatch(
        values=values.to_pylist(),
        keys=column("key"),
        headers=headers,
        partitions=column("partition"),
        topics=column("topic"),
        sources=column("source"),
        size=size,
    )


def _rows_batch(rows: list[Any]) -> OutBatch:
    """A chunk of a classic session's Rows (never empty) as columns."""
    names = rows[0].__fields__

    def own(name: str, convert: Any = None) -> list[Any] | None:
        if name not in names:
            return None
        col = [getattr(r, name) for r in rows]
        if all(v is None for v in col):
            return None
        return col if convert is None else [None if v is None else convert(v) for v in col]

    return OutBatch(
        values=[None if r.value is None else bytes(r.value) for r in rows],
        keys=own("key", bytes),
        headers=own("headers", _headers),
        partitions=own("partition"),
        topics=own("topic"),
        sources=own("source", bytes),
    )


def _headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    return [_header(h) for h in headers] if headers else None


def _arrow_stream(rows: DataFrame) -> Iterator[Any] | None:
    """The Connect client's own stream of Arrow tables (what its toLocalIterator reads), or None
    on a classic session."""
    if not is_connect(rows.sparkSession):
        return None
    connect: Any = rows  # a pyspark.sql.connect DataFrame: its client and plan
    client, plan = connect._session.client, connect._plan
    tags = client.get_tags()  # the run's attempt tag (spark.interruptTag finds the stream by it)

    def stream() -> Iterator[Any]:
        for tag in tags:  # a client's tags are per thread: this one may read the stream
            client.add_tag(tag)
        tables = client.to_table_as_iterator(plan.to_proto(client), plan.observations)
        yield from (t for t in tables if isinstance(t, pa.Table))

    return stream()


def _header(h: Any) -> tuple[str, bytes | None]:
    value = h["value"]
    if isinstance(value, str):
        value = value.encode()
    return str(h["key"]), None if value is None else bytes(value)


def _crash_at_first(batches: Iterator[OutBatch]) -> Iterator[OutBatch]:
    """Fault injection: end the process once the Spark job has streamed its first rows, before
    any is produced (the rest of the job still runs on the server). Deterministic, where a
    timer could fire after a small run had committed."""
    for _ in batches:
        faults.crash_point("during_spark")
    yield from ()
