"""One Kafka session per run (or command): the clients it needs, created once, closed at the end.

A run's steps share the session: planning (metadata, watermarks, topic ids, timestamps),
retention measuring, the mirror to consumer groups, and the dead-letter publish. Its clients
are created lazily, so a step that never needs one costs nothing, and they live as long as the
work, as in confluent-kafka's own examples:

- one admin client for everything that is a request: metadata, ListOffsets (watermarks,
  offsets for times), DescribeTopics (topic ids), consumer group offsets (read and commit) and
  topic creation; its requests are batched and in flight together;
- one consumer, assigned and unassigned per lookup, only to read a record's timestamp (event
  time alignment);
- one producer (dead letters, `drainer produce`), flushed before the session closes.

The cluster's metadata is fetched once per session (the first contact, which fails fast and in
one message when the cluster does not answer) and reused; `create_topics` refreshes it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from drainer.config import DrainConfig
from drainer.errors import KafkaUnavailable, TopicMissing
from drainer.kafka.clients import (
    PRODUCER_DEFAULTS,
    TIMEOUT_S,
    client_config,
    cluster_metadata,
    consumer_config,
    kafka_error,
    make_client,
    read_committed,
    unreachable,
)

log = logging.getLogger(__name__)

FLUSH_S = 60.0  # what closing waits for records still queued in the producer


@dataclass(frozen=True)
class Watermarks:
    """A partition's offsets: `low` the earliest that still exists (retention moves it),
    `high` where a plan may end (the last stable offset when reading committed records),
    `log_end` the log's end offset (the high watermark)."""

    low: int
    high: int
    log_end: int = -1

    def __post_init__(self) -> None:
        if self.log_end < 0:
            object.__setattr__(self, "log_end", self.high)


@dataclass(frozen=True)
class GroupCommit:
    topic: str
    partition: int
    offset: int
    metadata: str = ""


class KafkaSession:
    """The Kafka clients of one run or command, for one drain's settings; a context manager.

    Not thread-safe: one run's steps use it one after another.
    """

    def __init__(self, drain: DrainConfig) -> None:
        self.drain = drain
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._metadata: Any = None
        self._topic_ids: dict[str, str] = {}

    def __enter__(self) -> KafkaSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush the producer, close the consumer, drop the admin client; safe to call twice."""
        producer, consumer = self._producer, self._consumer
        self._admin = self._consumer = self._producer = None
        self._metadata = None
        try:
            if producer is not None:
                left = producer.flush(FLUSH_S)
                if left:
                    log.warning(
                        "%d records of drain %s were still queued after %.0f s when its Kafka "
                        "session closed; they were not sent",
                        left,
                        self.drain.name,
                        FLUSH_S,
                    )
        finally:
            if consumer is not None:
                consumer.close()

    # the clients, each created on first use

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = make_client(AdminClient, client_config(self.drain))
        return self._admin

    @property
    def consumer(self) -> Consumer:
        """A group-less reader (its group id is never joined nor committed to)."""
        if self._consumer is None:
            config = consumer_config(
                self.drain,
                **{
                    "group.id": f"drainer-probe-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                },
            )
            self._consumer = make_client(Consumer, config)
        return self._consumer

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = make_client(Producer, client_config(self.drain, **PRODUCER_DEFAULTS))
        return self._producer

    def _connected(self) -> AdminClient:
        """The admin client once the cluster answered: a cluster that does not fails fast."""
        self.metadata()
        return self.admin

    # topics

    def metadata(self) -> Any:
        """The cluster's metadata, fetched at the session's first contact and kept."""
        if self._metadata is None:
            self._metadata = cluster_metadata(self.admin)
        return self._metadata

    def partitions(self, levels: Iterable[int]) -> dict[int, list[int]]:
        """Partition numbers of each level topic; missing topics are one TopicMissing."""
        topics = self.metadata().topics
        found: dict[int, list[int]] = {}
        missing: list[str] = []
        for level in levels:
            name = self.drain.level_topic(level)
            topic = topics.get(name)
            if topic is None or topic.error is not None:
                missing.append(name)
            else:
                found[level] = sorted(topic.partitions)
        if missing:
            raise TopicMissing(self.drain.name, missing)
        return found

    def topic_ids(self, topics: list[str]) -> dict[str, str]:
        """topic -> its Kafka topic id (text); a topic deleted and created again gets a new one."""
        wanted = [t for t in topics if t not in self._topic_ids]
        if wanted:
            futures = self._connected().describe_topics(
                TopicCollection(wanted), request_timeout=TIMEOUT_S
            )
            missing = []
            for name, future in futures.items():
                try:
                    self._topic_ids[name] = str(future.result(timeout=TIMEOUT_S + 5).topic_id)
                except KafkaException as err:
                    if err.args and err.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        missing.append(name)
                        continue
                    raise unreachable(err) from None
                except TimeoutError as err:
                    raise unreachable(err) from None
            if missing:
                raise TopicMissing(self.drain.name, sorted(missing))
        return {t: self._topic_ids[t] for t in topics}

    def create_topics(self, extra: Iterable[str] = ()) -> list[str]:
        """Create the drain's level topics (and e.g. its DLQ topic); existing ones are left alone."""
        drain = self.drain
        existing = set(self.metadata().topics)
        wanted = [drain.level_topic(lvl) for lvl in range(drain.levels)] + list(extra)
        new = [
            NewTopic(
                name, num_partitions=drain.partitions, replication_factor=drain.replication_factor
            )
            for name in wanted
            if name not in existing
        ]
        if not new:
            return []
        admin = self._connected()
        self._metadata = None  # the next look sees the new topics
        for name, future in admin.create_topics(new, request_timeout=TIMEOUT_S).items():
            try:
                future.result(timeout=TIMEOUT_S + 5)
            except TimeoutError as err:
                raise unreachable(err) from None
            except KafkaException as err:
                if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise kafka_error(f"creating topic {name}: {err}", err) from None
        return [topic.topic for topic in new]

    # offsets in the log

    def list_offsets(
        self,
        requests: list[tuple[Mapping[tuple[str, int], OffsetSpec], IsolationLevel]],
    ) -> list[dict[tuple[str, int], int]]:
        """Several batched ListOffsets requests, in flight together on the admin client.

        With READ_COMMITTED, `latest` is the last stable offset: below the first open transaction.
        """
        if not any(specs for specs, _ in requests):
            return [{} for _ in requests]
        admin = self._connected()
        try:
            pending = [
                admin.list_offsets(
                    {TopicPartition(topic, part): spec for (topic, part), spec in specs.items()},
                    isolation_level=isolation,
                    request_timeout=TIMEOUT_S,
                )
                if specs
                else {}
                for specs, isolation in requests
            ]
            return [
                {
                    (tp.topic, tp.partition): fut.result(timeout=TIMEOUT_S + 5).offset
                    for tp, fut in futures.items()
                }
                for futures in pending
            ]
        except (KafkaException, TimeoutError) as err:
            raise unreachable(err) from None

    def watermarks(self, partitions: Mapping[int, list[int]]) -> dict[tuple[int, int], Watermarks]:
        """(level, partition) -> earliest, plannable end and log end offsets."""
        drain = self.drain
        keys = [(drain.level_topic(lvl), p) for lvl, parts in partitions.items() for p in parts]
        latest = {k: OffsetSpec.latest() for k in keys}
        requests = [
            ({k: OffsetSpec.earliest() for k in keys}, IsolationLevel.READ_UNCOMMITTED),
            (latest, IsolationLevel.READ_UNCOMMITTED),
        ]
        if read_committed(drain):
            requests.append((latest, IsolationLevel.READ_COMMITTED))
        low, log_end, *committed = self.list_offsets(requests)
        high = committed[0] if committed else log_end
        found = {}
        for level, parts in partitions.items():
            for part in parts:
                key = (drain.level_topic(level), part)
                found[(level, part)] = Watermarks(low[key], high[key], log_end[key])
        return found

    def offsets_for_time(
        self, requests: Mapping[tuple[int, int], int], ends: Mapping[tuple[int, int], int]
    ) -> dict[tuple[int, int], int]:
        """First offset whose timestamp is >= the given ms per (level, partition); the end if none."""
        specs = {
            (self.drain.level_topic(level), part): OffsetSpec.for_timestamp(ts)
            for (level, part), ts in requests.items()
        }
        (found,) = self.list_offsets([(specs, IsolationLevel.READ_UNCOMMITTED)])
        result = {}
        for level, part in requests:
            offset = found[(self.drain.level_topic(level), part)]
            result[(level, part)] = ends[(level, part)] if offset < 0 else offset
        return result

    def record_timestamps(
        self, positions: Mapping[tuple[int, int], int]
    ) -> dict[tuple[int, int], int | None]:
        """Timestamp (ms) of the record at each (level, partition) offset: the next pending one.

        Reads one record per partition; used only when a drain aligns by event time (`max_gap`).
        """
        if not positions:
            return {}
        drain = self.drain
        consumer = self.consumer
        consumer.assign(
            [TopicPartition(drain.level_topic(lvl), p, off) for (lvl, p), off in positions.items()]
        )
        try:
            wanted = {(drain.level_topic(lvl), p): (lvl, p) for (lvl, p) in positions}
            found: dict[tuple[int, int], int | None] = {}
            deadline = time.monotonic() + TIMEOUT_S
            while wanted and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                key = (message.topic(), message.partition())
                error = message.error()
                if key not in wanted:
                    continue
                if error is None and message.offset() < positions[wanted[key]]:
                    continue  # fetched before this lookup's assignment: not the asked record
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise kafka_error(f"reading {key[0]}[{key[1]}]: {error.str()}", error)
                kind, stamp = (TIMESTAMP_NOT_AVAILABLE, -1) if error else message.timestamp()
                # at the end, or no usable timestamp (old message format): unknown, so it
                # cannot define t_min
                known = kind != TIMESTAMP_NOT_AVAILABLE and stamp >= 0
                found[wanted.pop(key)] = stamp if known else None
                consumer.pause([TopicPartition(*key)])
            for key in wanted.values():
                found[key] = None
            return found
        finally:
            consumer.unassign()

    # consumer groups (the mirror of committed offsets)

    def group_offsets(
        self, groups: Mapping[str, Iterable[tuple[str, int]]]
    ) -> dict[str, dict[tuple[str, int], tuple[int, str]]]:
        """group -> (topic, partition) -> (offset, metadata); offset < 0: nothing committed."""
        requests = {
            group: [TopicPartition(t, p) for t, p in keys] for group, keys in groups.items()
        }
        admin = self._connected()
        pending = {
            group: admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, tps)], request_timeout=TIMEOUT_S
            )[group]
            for group, tps in requests.items()
            if tps
        }
        found: dict[str, dict[tuple[str, int], tuple[int, str]]] = {g: {} for g in groups}
        for group, future in pending.items():
            try:
                answer = future.result(timeout=TIMEOUT_S + 5)
            except (KafkaException, TimeoutError) as err:
                raise unreachable(err) from None
            for tp in answer.topic_partitions:
                if tp.error is not None:
                    raise kafka_error(
                        f"reading offsets of group {group}: {tp.error.str()}", tp.error
                    )
                found[group][(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
        return found

    def commit_group_offsets(
        self, commits: Mapping[str, list[GroupCommit]]
    ) -> dict[str, KafkaUnavailable]:
        """Commit offsets to consumer groups, all groups at once; returns the groups that failed.

        An admin commit (AlterConsumerGroupOffsets) is what a group-less consumer's commit is:
        the same record in `__consumer_offsets`, seen by lag tools alike, refused while the group
        has active members.
        """
        admin = self._connected()
        pending = {
            group: admin.alter_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        group,
                        [
                            TopicPartition(c.topic, c.partition, c.offset, c.metadata)
                            for c in group_commits
                        ],
                    )
                ],
                request_timeout=TIMEOUT_S,
            )[group]
            for group, group_commits in commits.items()
            if group_commits
        }
        failed: dict[str, KafkaUnavailable] = {}
        for group, future in pending.items():
            try:
                answer = future.result(timeout=TIMEOUT_S + 5)
            except (KafkaException, TimeoutError) as err:
                failed[group] = _commit_error(group, err)
                continue
            errors = [tp.error for tp in answer.topic_partitions if tp.error is not None]
            if errors:
                failed[group] = _commit_error(group, errors[0])
        return failed


def _commit_error(group: str, err: Any) -> KafkaUnavailable:
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        detail = err.str()
        if err.code() in (
            KafkaError._TRANSPORT,
            KafkaError._TIMED_OUT,
            KafkaError._ALL_BROKERS_DOWN,
        ):
            return unreachable(KafkaException(err))
        return kafka_error(f"committing offsets of group {group}: {detail}", err)
    return unreachable(err)
