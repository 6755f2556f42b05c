"""The Kafka sink's producer on the Spark server: the run's transaction held by one Java
producer in the Connect server's JVM (`KafkaTxnSink.java` beside this module), which the
write's tasks share, so the output rows never cross to the driver. The writer is handed the
protocol (header names, the marker's template, the kinds of failure) as options: it defines
none of it (drainer.sinks.kafka.protocol).

The driver keeps every step the exactly-once design rests on (docs/kafka-sink.md): it fences
and finds the marker of a resumed run first (`RunTransaction`), then one write opens the
attempt's transaction on the server (`initTransactions` fences every older producer of the
drain) and produces the rows, a second one the dead letters; the driver then checks its
Postgres lease and only then asks the server to send the marker and commit. A driver that dies
before that leaves the transaction open on the server: it is never committed, and the next
attempt's `initTransactions` aborts it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from drainer import faults
from drainer.config import DrainConfig
from drainer.config.kafka_clients import java_settings, redact
from drainer.config.sink_models import KafkaSinkConfig
from drainer.errors import ConfigError, DrainerError
from drainer.sinks.kafka.errors import init_failure
from drainer.sinks.kafka.protocol import (
    BYTES_TOKEN,
    MARKER_TOPIC,
    PRODUCED_TOKEN,
    RUN_HEADER,
    SOURCE_HEADER,
    TOMBSTONES,
    RunMarker,
    java_kinds,
    marker_partition,
    run_header,
)
from drainer.sinks.kafka.server_jar import SERVER_CONF, SINK_CLASS
from drainer.sinks.kafka.transactions import (
    OUTPUT_PRODUCER_DEFAULTS,
    TRANSACTION_TIMEOUT_S,
    DeadLetterJoin,
    RunTransaction,
)
from spark_jobs.sinks.faults import crash_once

# a Java failure, as KafkaTxnSink names it: `drainer-kafka-sink[kind][source][topic] detail`
_FAILURE = re.compile(r"drainer-kafka-sink\[(\w+)\]\[([^\]]*)\]\[([^\]]*)\] ?([^\n]*)")
_DURING_SPARK_S = 0.2  # the during_spark fault: this far into the write, or at its end
# what a session's server offers, asked once per session (kept here: the session is shared,
# a sink does not write to it)
_OFFERED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def why_not_on_server(
    spark: SparkSession, config: KafkaSinkConfig, columns: list[str]
) -> str | None:
    """Why this run's output cannot be produced on the Spark server (None: it can)."""
    if config.producer == "driver":
        return "the sink says `producer: driver`"
    if config.kafka is not None:
        return "the sink has a cluster of its own (`sink.kafka:`)"
    if "topic" in columns:
        # a row's own topic is checked to exist before it is produced, which the driver does
        return "its rows name their own topics"
    offered = _OFFERED.get(spark)
    if offered is None:
        jar = spark.conf.get(SERVER_CONF, "") or ""
        master = spark.conf.get("spark.master", "") or ""
        if not jar:
            offered = (
                "the Spark server was not started with drainer's producer jar (`drainer "
                "services up` with a JDK on PATH starts it so)"
            )
        elif not master.startswith("local"):
            offered = f"its tasks run on {master}, in other JVMs than the one producer"
        else:
            offered = ""
        with contextlib.suppress(TypeError):  # a session that cannot be weakly referenced
            _OFFERED[spark] = offered
    return offered or None


def server_defaults() -> dict[str, str]:
    """The sink's producer defaults (`OUTPUT_PRODUCER_DEFAULTS`) as the JVM's KafkaProducer
    takes them: librdkafka's local-queue bound has no JVM twin (buffer.memory bounds its queue)."""
    return {k: str(v) for k, v in OUTPUT_PRODUCER_DEFAULTS.items() if not k.startswith("queue.")}


def producer_settings(drain: DrainConfig, bootstrap: str) -> dict[str, str]:
    """The server producer's settings: the sink's defaults, then the drain's `kafka:` block as
    Spark's Java clients take it (with `kafka_java:`), then what exactly once rests on."""
    settings = {
        **server_defaults(),
        "bootstrap.servers": bootstrap,
        **java_settings(drain),
        "transaction.timeout.ms": str(TRANSACTION_TIMEOUT_S * 1000),
    }
    settings.pop("isolation.level", None)  # a consumer's
    return settings


def produce_on_server(
    txn: RunTransaction,
    rows: DataFrame,
    topic: str,
    attempt: int,
    settings: Mapping[str, str],
    still_ours: Callable[[], None],
    dead_letters: DeadLetterJoin | None,
    crash_in_spark: bool = False,
    took: dict[str, float] | None = None,
    tombstones: bool = False,
) -> RunMarker:
    """Produce `rows` (and the dead letters) in the attempt's transaction on the server; commit
    it with the run's marker once the lease is still ours. Any failure aborts it.

    `took` gets the seconds of each step: `write` (the Spark job that reads, processes and
    produces: `open` and `flush` of it on the server), `commit` (the control job: the server's
    `marker`, `commit` and `close`), and the driver's own steps between them."""
    took = {} if took is None else took
    spark = rows.sparkSession
    known = txn.existing_topics()  # the sink's topic is known to exist (KafkaSparkSink)
    key = f"{txn.tid}/{txn.run_id}/{txn.nonce}/{attempt}"
    txn.close()  # a resumed run's driver producer fenced and looked: the server's takes over
    still_ours()  # a lost lease produces nothing
    if crash_in_spark:
        at = time.monotonic() + _DURING_SPARK_S
        crash_once(lambda: time.monotonic() >= at)
    try:
        header = run_header(txn.run_id, txn.nonce, attempt).decode()
        write = _writer(rows, key, topic, settings).option("open", "true")
        write = write.option(TOMBSTONES, "true" if tombstones else "false")
        started = time.monotonic()
        _run(txn, topic, write.option("run_header", header).save)
        took["write"] = time.monotonic() - started
        dlq_max_attempts = dead = None
        if dead_letters is not None and dead_letters.topic in known:  # else: after the commit
            started = time.monotonic()
            dead = _send_dead_letters(txn, spark, key, dead_letters, settings)
            dlq_max_attempts = dead_letters.max_attempts
            took["dead_letters"] = time.monotonic() - started
        if crash_in_spark:
            faults.crash_point("during_spark")
        faults.crash_point("mid_produce")  # every record on the broker, in the open transaction
        started = time.monotonic()
        still_ours()  # after the fence: a takeover since then is seen here, before the commit
        took["lease_check"] = time.monotonic() - started
        # a pause here (a zombie) meets a takeover as the driver producer does: fenced in Kafka
        faults.pause_point("after_produce")
        # the marker but for its counts, which the server's producer fills (protocol.fill)
        marker = RunMarker(
            txn.drain,
            txn.run_id,
            txn.nonce,
            attempt,
            {},
            0,
            dlq_max_attempts=dlq_max_attempts,
            dead_letters=dead or 0,
        )
        started = time.monotonic()
        committed = _run(
            txn,
            MARKER_TOPIC,
            lambda: (
                _control(spark, key, "commit")
                .option("marker_topic", MARKER_TOPIC)
                .option("marker_partition", str(marker_partition(txn.drain)))
                .option("marker_key", txn.drain)
                .option("marker_template", marker.template())
                .option("marker_produced_token", PRODUCED_TOKEN)
                .option("marker_bytes_token", BYTES_TOKEN)
                .load()
                .collect()
            ),
        )
        took["commit"] = time.monotonic() - started
        # a server started before its jar reported steps has none: the run goes on without them
        took.update(server_steps(committed[0].asDict().get("steps") or ""))
    except BaseException:
        with contextlib.suppress(Exception):  # a dead server's transaction ends with its timeout
            _control(spark, key, "abort").load().collect()
        raise
    return dataclasses.replace(
        marker,
        produced={r.topic: int(r.records) for r in committed if r.records},
        size=sum(int(r.bytes) for r in committed),
        offset=int(committed[0].marker_offset),  # exact: the server's producer sent it
    )


def server_steps(text: str) -> dict[str, float]:
    """The server's `step=ms;...` (KafkaTxnSink's `steps`) as seconds, each `server_<step>`."""
    found = {}
    for item in filter(None, (text or "").split(";")):
        name, _, ms = item.partition("=")
        with contextlib.suppress(ValueError):
            found[f"server_{name}"] = float(ms) / 1000
    return found


def _writer(rows: DataFrame, key: str, topic: str, settings: Mapping[str, str]) -> Any:
    write = (
        rows.write.format(SINK_CLASS)
        .mode("append")
        .option("key", key)
        .option("topic", topic)
        .option("transactional.id", key.split("/", 1)[0])
        # the protocol (drainer.sinks.kafka.protocol), handed to the Java writer
        .option("run_header_name", RUN_HEADER)
        .option("source_header_name", SOURCE_HEADER)
        .option("kinds", java_kinds())
    )
    for name, value in settings.items():
        write = write.option(f"kafka.{name}", value)
    return write


def _control(spark: SparkSession, key: str, action: str) -> Any:
    return (
        spark.read.format(SINK_CLASS)
        .option("action", action)
        .option("key", key)
        .option("kinds", java_kinds())
    )


def _send_dead_letters(
    txn: RunTransaction,
    spark: SparkSession,
    key: str,
    join: DeadLetterJoin,
    settings: Mapping[str, str],
) -> int:
    """The dead letters, into the open transaction on the server; returns how many."""
    records = join.records()
    if records:
        rows = spark.createDataFrame(
            [(r.value, r.key, [(k, v) for k, v in r.headers]) for r in records],
            "value binary, key binary, headers array<struct<key: string, value: binary>>",
        )
        _run(txn, join.topic, lambda: _writer(rows, key, join.topic, settings).save())
    return len(records)


def _run(txn: RunTransaction, topic: str, step: Callable[[], Any]) -> Any:
    """`step()`, a failure the server's producer named turned into drainer's own error."""
    try:
        return step()
    except Exception as err:
        found = _FAILURE.search(str(err))
        if found is None:
            raise
        raise _failure(txn, topic, *found.groups()) from None


def _failure(
    txn: RunTransaction, topic: str, kind: str, source: str, named: str, detail: str
) -> DrainerError:
    detail = redact(detail)[:500]
    if kind.startswith("init_"):
        return init_failure(kind.removeprefix("init_"), detail, txn.drain, txn.tid)
    if kind == "settings":
        return ConfigError(
            f"the Spark server's Kafka producer refused the drain's settings ({detail}): fix "
            "them in `kafka:` or `kafka_java:`, or set the sink's `producer: driver`. Nothing "
            "was committed"
        )
    return txn.failed(kind, detail, source or None, named or topic)
