"""A run's output produced to Kafka in one transaction, with a marker that proves the commit.

One producer holds a run's transaction: this module's, in the driver, or the Spark server's
(spark_jobs.sinks.kafka.server), whose runs still fence and find markers through this one.
Its `transactional.id` is the drain's (`drainer-<drain>`): `init_transactions` of a newer
attempt bumps the producer epoch, which aborts whatever transaction an older attempt left open
and fences that attempt, so a paused process that wakes after a takeover can neither
produce nor commit. The same transaction carries a marker record (drain, run, nonce) on the
marker topic; a resumed run reads that topic `read_committed`, so a marker it finds is a
committed transaction, and the run is not produced twice (docs/kafka-sink.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from drainer import faults
from drainer.config.kafka_clients import redact
from drainer.errors import ConfigError, DrainerError, KafkaUnavailable
from drainer.kafka.clients import make_client, retry_passing
from drainer.sinks.kafka.errors import init_failure, produce_failure
from drainer.sinks.kafka.out_batches import OutBatch, produce_when_room, send_batch
from drainer.sinks.kafka.protocol import (
    MARKER_PARTITIONS,
    MARKER_TOPIC,
    RUN_HEADER,
    SOURCE_HEADER,
    RunMarker,
    kind_of,
    marker_partition,
    run_header,
    transactional_id,
)

if TYPE_CHECKING:
    from drainer.kafka.producer import OutRecord

TRANSACTION_TIMEOUT_S = 60  # the coordinator aborts a transaction open longer than this
# the output producer's defaults for a large batch of output, which the drain's settings may
# change (`kafka_librdkafka:`, e.g. compression.type: zstd)
OUTPUT_PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "compression.type": "lz4",
}


@dataclass(frozen=True)
class DeadLetterJoin:
    """The drain's dead letters, to be produced in the run's transaction (exactly once)."""

    topic: str  # the drain's dlq_topic, on the sink's cluster
    max_attempts: int
    # asked once the output is produced: the Spark job's tasks have staged every failure then
    records: Callable[[], list[OutRecord]]


class KnownTopics:
    """`topic in known`: whether a topic exists, each looked up once."""

    def __init__(self, exists: Callable[[str], bool]) -> None:
        self._exists = exists
        self._found: dict[str, bool] = {}

    def __contains__(self, topic: object) -> bool:
        if not isinstance(topic, str):
            return False
        if topic not in self._found:
            self._found[topic] = self._exists(topic)
        return self._found[topic]


class RunTransaction:
    """The drain's transactional producer for one attempt of a run.

    `open()` fences every older producer of the drain (aborting an open transaction of a
    crashed or paused attempt); `find_marker()` then reads what is committed; `produce()` sends
    the run's rows and its marker in one transaction and commits it.
    """

    def __init__(self, config: Mapping[str, Any], drain: str, run_id: int, nonce: str) -> None:
        self.config = dict(config)
        self.drain, self.run_id, self.nonce = drain, run_id, nonce
        self.tid = transactional_id(drain)
        self._producer: Any = None
        self._admin: AdminClient | None = None
        self._marker_topic_ready = False
        self._known: KnownTopics | None = None
        # delivery failures (one callback for the producer: a Python callable per record would
        # cost more than producing it); each names its record's source from its headers
        self._errors: list[tuple[KafkaError, str | None, str]] = []

    # fencing

    def open(self, timeout_s: float = 60.0) -> None:
        """init_transactions: from here on no older attempt of the drain can commit."""
        if self._producer is not None:
            return
        producer = make_client(
            Producer,
            {
                **OUTPUT_PRODUCER_DEFAULTS,
                **self.config,
                # what the exactly-once design rests on: not settable
                "transactional.id": self.tid,
                # a delivery report per failed record only: a Python callback per record costs
                # more than producing it
                "delivery.report.only.error": True,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_S * 1000,
                "on_delivery": self._delivered,
            },
        )
        try:
            producer.init_transactions(timeout_s)
        except KafkaException as err:
            raise self._init_failed(err) from None
        self._producer = producer

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            headers = dict(msg.headers() or ())
            source = headers.get(SOURCE_HEADER)
            self._errors.append((err, source.decode() if source else None, msg.topic()))

    def _init_failed(self, err: KafkaException) -> DrainerError:
        error = err.args[0]
        return init_failure(kind_of(error.code()), redact(error.str()), self.drain, self.tid)

    def ensure_marker_topic(self) -> None:
        """The marker topic, created when missing: compacted by drain, kept forever."""
        if self._marker_topic_ready or self._exists(MARKER_TOPIC):
            self._marker_topic_ready = True
            return
        topic = NewTopic(
            MARKER_TOPIC,
            num_partitions=MARKER_PARTITIONS,
            config={"cleanup.policy": "compact", "retention.ms": "-1"},
        )
        try:
            self._admin_client().create_topics([topic])[MARKER_TOPIC].result(30)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigError(
                    f"the Kafka sink's marker topic {MARKER_TOPIC} is missing and could not be "
                    f"created ({redact(err.args[0].str())}): create it (compacted, "
                    f"{MARKER_PARTITIONS} partitions) or grant CREATE. Nothing was committed"
                ) from None
        self._marker_topic_ready = True

    def existing_topics(self) -> KnownTopics:
        """The topics output rows go to, each looked up once when first met: describing one
        topic is a small request, where listing every topic of a large cluster is not."""
        if self._known is None:
            self._known = KnownTopics(self._exists)
        return self._known

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = make_client(AdminClient, _plain(self.config))
        return self._admin

    def _exists(self, topic: str) -> bool:
        """Whether `topic` exists; one it may not describe counts as existing (producing to it
        then fails with the grant to ask for)."""
        future = self._admin_client().describe_topics(TopicCollection([topic]))[topic]
        try:
            future.result(30)
        except KafkaException as err:
            code = err.args[0].code()
            if kind_of(code) == "missing":
                return False
            if kind_of(code) == "denied":
                return True
            raise KafkaUnavailable(
                f"describing the Kafka sink's topic {topic} failed ({redact(err.args[0].str())}). "
                "Nothing was committed: rerun"
            ) from None
        return True

    def cleanup_policy(self, topic: str) -> str | None:
        """The topic's `cleanup.policy` (e.g. `delete`, `compact`, `compact,delete`), or None
        where the sink may not describe its configs (producing then proceeds, as `_exists`)."""
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        future = self._admin_client().describe_configs([resource])[resource]
        try:
            entries = future.result(30)
        except KafkaException as err:
            if kind_of(err.args[0].code()) == "denied":
                return None
            raise KafkaUnavailable(
                f"describing the Kafka sink's topic {topic} failed ({redact(err.args[0].str())}). "
                "Nothing was committed: rerun"
            ) from None
        entry = entries.get("cleanup.policy")
        return None if entry is None else str(entry.value)

    # the proof

    def find_marker(self, timeout_s: float = 60.0) -> RunMarker | None:
        """The run's marker if a committed transaction carries it.

        Read after `open()`, so no transaction of this drain is still open. Another drain
        sharing the marker partition may have one open (its marker produced, its commit not yet
        made), which holds the partition's last stable offset below markers committed after it:
        the read waits until the last stable offset reaches the end the partition had when the
        read began (that transaction ends within `transaction.timeout.ms`), so a committed
        marker of this run is never missed.
        """
        tp = TopicPartition(MARKER_TOPIC, marker_partition(self.drain))
        end = self._end_offset(tp, "read_uncommitted", timeout_s)
        deadline = time.monotonic() + 2 * TRANSACTION_TIMEOUT_S
        while self._end_offset(tp, "read_committed", timeout_s) < end:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"{MARKER_TOPIC}[{tp.partition}] holds a transaction open for longer than "
                    f"{2 * TRANSACTION_TIMEOUT_S} s, so whether run {self.run_id} committed "
                    "cannot be read yet. Nothing was committed: rerun"
                )
            time.sleep(0.5)
        return self._read_markers(tp, timeout_s)

    def _end_offset(self, tp: TopicPartition, isolation: str, timeout_s: float) -> int:
        """The partition's end as a consumer with `isolation` sees it (read_committed: the last
        stable offset): one ListOffsets request of the admin client (a consumer made and closed
        for it took ~0.3 s of the run)."""
        level = (
            IsolationLevel.READ_COMMITTED
            if isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        admin = self._admin_client()

        def end() -> int:
            futures = admin.list_offsets(
                {tp: OffsetSpec.latest()},  # type: ignore[no-untyped-call]
                isolation_level=level,
                request_timeout=timeout_s,
            )
            return int(futures[tp].result(timeout_s + 5).offset)

        try:  # retried as the drain's own offset lookups are (a leader election, a crashed broker)
            return retry_passing(end, lambda: admin.list_topics(tp.topic, timeout=timeout_s))
        except KafkaException as err:
            raise KafkaUnavailable(
                f"reading the end of {tp.topic}[{tp.partition}] failed "
                f"({redact(err.args[0].str())}). Nothing was committed: rerun"
            ) from None
        except TimeoutError:
            raise KafkaUnavailable(
                f"reading the end of {tp.topic}[{tp.partition}] timed out after "
                f"{timeout_s:.0f} s. Nothing was committed: rerun"
            ) from None

    def _read_markers(self, tp: TopicPartition, timeout_s: float) -> RunMarker | None:
        consumer = make_client(
            Consumer,
            {
                **_plain(self.config),
                "group.id": f"drainer-markers-{self.drain}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            },
        )
        found: RunMarker | None = None
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
            if high <= low:
                return None
            consumer.assign([TopicPartition(tp.topic, tp.partition, low)])
            while True:
                msg = consumer.poll(timeout_s)
                if msg is None:
                    raise KafkaUnavailable(
                        f"reading {MARKER_TOPIC} for run {self.run_id}'s marker timed out after "
                        f"{timeout_s:.0f} s. Nothing was committed: rerun"
                    )
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return found
                    raise KafkaUnavailable(f"reading {MARKER_TOPIC}: {msg.error().str()}")
                marker = RunMarker.parse(msg.value() or b"", msg.offset())
                if marker is not None and (marker.drain, marker.run_id, marker.nonce) == (
                    self.drain,
                    self.run_id,
                    self.nonce,
                ):
                    found = marker
        finally:
            consumer.close()

    # the run's transaction

    def produce(
        self,
        batches: Iterable[OutBatch],
        default_topic: str,
        attempt: int,
        still_ours: Callable[[], None],
        dead_letters: DeadLetterJoin | None = None,
        tombstones: bool = False,
    ) -> RunMarker:
        """Produce every batch's records (then `dead_letters`, when its topic exists) and the
        run's marker in one transaction; commit it.

        `still_ours()` raises if the run's Postgres lease was lost; it is asked once the
        producer is fenced-in, so an attempt that was paused before `open()` cannot produce a
        run another attempt already committed. Any failure aborts the transaction: nothing of it
        becomes visible to `read_committed` consumers. The batches may still be computed while
        they are produced: the broker's transaction starts with the first record sent.
        """
        self.open()
        still_ours()
        producer = self._producer
        known = self.existing_topics()
        produced: Counter[str] = Counter()
        errors = self._errors
        errors.clear()
        size = n = 0
        run_headers = [(RUN_HEADER, run_header(self.run_id, self.nonce, attempt))]
        # the marker partition's end before the transaction: at or just below the marker's
        # offset (other drains share the partition), looked up while Spark computes
        before = self._end_offset(
            TopicPartition(MARKER_TOPIC, marker_partition(self.drain)), "read_uncommitted", 30
        )
        crash_mid_produce = faults.armed("mid_produce")  # settings are read once, not per batch
        producer.begin_transaction()
        try:
            for batch in batches:
                size += send_batch(
                    producer.produce,
                    producer.poll,
                    batch,
                    default_topic,
                    known,
                    run_headers,
                    produced,
                    self._produce_failed,
                    tombstones,
                )
                producer.poll(0)  # delivery reports of failed records
                if errors:
                    raise self._produce_failed(*errors[0])
                n += len(batch)
                if n >= 100 and crash_mid_produce:
                    producer.flush(30)  # records on the broker, inside the open transaction
                    faults.crash_point("mid_produce")
            dlq_max_attempts = dead = None
            if dead_letters is not None and dead_letters.topic in known:  # else: after the commit
                dead = self._send_dead_letters(dead_letters)
                if dead:
                    produced[dead_letters.topic] += dead
                dlq_max_attempts = dead_letters.max_attempts
            producer.flush(120)  # every row delivered (or its error known) before the marker
            if errors:
                raise self._produce_failed(*errors[0])
            marker = RunMarker(
                self.drain,
                self.run_id,
                self.nonce,
                attempt,
                produced,
                size,
                dlq_max_attempts=dlq_max_attempts,
                dead_letters=dead or 0,
            )
            producer.produce(
                MARKER_TOPIC,
                marker.value(),
                self.drain.encode(),
                partition=marker_partition(self.drain),
            )
            producer.flush(120)
            if errors:
                raise self._produce_failed(*errors[0])
            faults.pause_point("after_produce")
            try:
                producer.commit_transaction(120)
            except KafkaException as err:
                raise self._produce_failed(err.args[0], None, default_topic) from None
        except BaseException:
            _abort(producer)
            raise
        # the marker's offset: at or just below the end before (other drains share the partition)
        return dataclasses.replace(marker, offset=before)

    def _send_dead_letters(self, join: DeadLetterJoin) -> int:
        """The dead letters, into the open transaction; returns how many."""
        records = join.records()
        for record in records:
            headers = list(record.headers)
            try:
                try:
                    self._producer.produce(join.topic, record.value, record.key, headers=headers)
                except BufferError:  # the local queue is full (the cold path)
                    produce_when_room(
                        self._producer.produce,
                        self._producer.poll,
                        join.topic,
                        record.value,
                        record.key,
                        headers,
                        {},
                    )
            except KafkaException as err:
                raise self._produce_failed(err.args[0], None, join.topic) from None
        return len(records)

    def _produce_failed(self, err: KafkaError, source: str | None, topic: str) -> DrainerError:
        return self.failed(kind_of(err.code()), redact(err.str()), source, topic)

    def failed(self, kind: str, detail: str, source: str | None, topic: str) -> DrainerError:
        """The error for a failure of `kind` (protocol.KINDS) producing the run's transaction."""
        return produce_failure(kind, detail, self.run_id, self.drain, self.tid, source, topic)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(0)
            self._producer = None


def _plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """The producer's connection settings, for an admin client or a consumer."""
    producer_only = ("transactional.id", "linger.ms", "batch.size", "compression.type")
    return {k: v for k, v in config.items() if k not in producer_only}


def _abort(producer: Any) -> None:
    """Abort the open transaction; a fenced or dead producer's is aborted by the coordinator."""
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(30)
