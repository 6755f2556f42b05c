"""The Kafka sink, Spark side: Spark computes the run's output, the driver produces it in one
Kafka transaction with the run's marker, before the Postgres commit.

Roles: the Spark job computes and caches the output rows (the run's stage: on the Connect
server, not in the driver); only then does the driver open its transaction and stream the rows
from the stage, one Spark partition at a time (`toLocalIterator`), so the transaction lasts
the produce-and-commit step only and driver memory stays bounded by a partition. A resumed run
first fences every older attempt (`init_transactions`) and then looks for its marker
`read_committed`: found, the run is committed in Kafka and is not produced again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from drainer import faults
from drainer.config import DrainConfig
from drainer.config.kafka_clients import own_cluster_settings
from drainer.errors import ConfigError
from drainer.kafka.clients import client_config
from drainer.kafka.transactions import OutRow, RunMarker, RunTransaction
from drainer.lifecycle.results import RunContext
from drainer.sinks import TableCommit
from drainer.sinks.kafka import KafkaSink
from drainer.store import runs
from drainer.store.leases import check_fence
from spark_jobs.session import is_connect
from spark_jobs.sinks.base import SparkSink

SOURCE_COLUMN = "_drainer_source"
_TEXT_OR_BYTES = (StringType, BinaryType)


class KafkaSparkSink(KafkaSink, SparkSink):
    _transaction: RunTransaction | None = None
    _crash_in_spark = False

    def committed(self, spark: SparkSession, ctx: RunContext) -> TableCommit | None:
        """Fence older attempts of the drain, then find the run's marker `read_committed`."""
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
        # the run's stage: Spark computes (and record mode handles) every row before the
        # transaction opens; a lost cached block is recomputed from the same ranges
        staged = rows.persist()
        try:
            if self._crash_in_spark:
                _crash_soon()
            staged.count()

            def still_ours() -> None:
                with ctx.engine.connect() as conn:
                    check_fence(conn, ctx.lease, shared=True)

            marker = self._txn(ctx).produce(_out_rows(staged), self.topic, ctx.attempt, still_ours)
        finally:
            staged.unpersist()
        return self._commit(marker)

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

    def _commit(self, marker: RunMarker) -> TableCommit:
        assert self._transaction is not None
        return TableCommit(
            "kafka",
            self.topic,
            marker.offset,  # the marker's offset on the marker topic
            len(marker.produced),
            marker.size,
            sum(marker.produced.values()),
            attempt=marker.attempt,  # its staged failures are the ones the commit counts
            details={
                "produced": dict(marker.produced),
                "transactional_id": self._transaction.tid,
                # earlier attempts of the run: none committed, each one's transaction (if it
                # opened one) was aborted by the coordinator or fenced by the next attempt
                "aborted_attempts": marker.attempt - 1,
                "attempt": marker.attempt,
            },
        )


def kafka_rows(out: DataFrame) -> DataFrame:
    """The output as Spark's Kafka sink schema, plus the source record where there is one.

    A row comes from one record when record mode made it (`_drainer_source`) or when the
    processor kept the source columns `topic`, `partition` and `offset`: those then say where
    it came from, not where it goes (the sink's topic). Otherwise `topic` and `partition`
    route the row as in Spark's Kafka sink.
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
    if SOURCE_COLUMN in fields:
        source = F.col(SOURCE_COLUMN)
    elif from_record:
        source = F.concat_ws("/", "topic", "partition", "offset")
    else:
        source = F.lit(None).cast("string")
    routes = not from_record
    return out.select(
        F.col("value").cast("binary").alias("value"),
        (F.col("key").cast("binary") if "key" in fields else F.lit(None).cast("binary")).alias(
            "key"
        ),
        (F.col("headers") if "headers" in fields else F.lit(None)).alias("headers"),
        (
            F.col("partition").cast(IntegerType())
            if routes and "partition" in fields
            else F.lit(None).cast("int")
        ).alias("partition"),
        (F.col("topic").cast("string") if routes and "topic" in fields else F.lit(None)).alias(
            "topic"
        ),
        source.alias("source"),
    )


def _out_rows(staged: DataFrame) -> Iterator[OutRow]:
    """The stage's rows, streamed one Spark partition at a time.

    On Spark Connect the rows arrive as the Arrow tables the server streams (converted column by
    column: several times faster than building a Row per record); elsewhere as Rows.
    """
    tables = _arrow_stream(staged)
    if tables is None:
        for row in staged.toLocalIterator():
            yield _out_row(row.value, row.key, row.headers, row.partition, row.topic, row.source)
        return
    for table in tables:
        columns = [table.column(name).to_pylist() for name in _COLUMNS]
        for value, key, headers, partition, topic, src in zip(*columns, strict=True):
            yield _out_row(value, key, headers, partition, topic, src)


_COLUMNS = ("value", "key", "headers", "partition", "topic", "source")


def _out_row(value: Any, key: Any, headers: Any, partition: Any, topic: Any, src: Any) -> OutRow:
    return OutRow(
        value=None if value is None else bytes(value),
        key=None if key is None else bytes(key),
        headers=[_header(h) for h in headers or ()],
        partition=partition,
        topic=topic,
        source=src,
    )


def _arrow_stream(staged: DataFrame) -> Iterator[Any] | None:
    """The Connect client's own stream of Arrow tables (what its toLocalIterator reads), or None
    on a classic session."""
    if not is_connect(staged.sparkSession):
        return None
    connect: Any = staged  # a pyspark.sql.connect DataFrame: its client and plan
    client, plan = connect._session.client, connect._plan
    stream = client.to_table_as_iterator(plan.to_proto(client), plan.observations)
    return (t for t in stream if isinstance(t, pa.Table))


def _header(h: Any) -> tuple[str, bytes | None]:
    value = h["value"]
    if isinstance(value, str):
        value = value.encode()
    return str(h["key"]), None if value is None else bytes(value)


def _crash_soon(after_s: float = 0.3) -> None:
    """Fault injection: end the process while the Spark job computes the run's rows."""

    def crash() -> None:
        time.sleep(after_s)
        faults.crash_point("during_spark")

    threading.Thread(target=crash, daemon=True, name="drainer-fault").start()
