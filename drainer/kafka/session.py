"""One Kafka session per run (or command): the clients it needs, created once, closed at the end.

A run's steps share the session: planning (metadata, watermarks, topic ids, timestamps),
retention measuring, the mirror to consumer groups, and the dead-letter publish. Its clients
are created lazily, so a step that never needs one costs nothing, and they live as long as the
work, as in confluent-kafka's own examples:

- one admin client for everything that is a request: metadata, ListOffsets (watermarks,
  offsets for times), DescribeTopics (topic ids), consumer group offset commits and topic
  creation; its requests are batched and in flight together;
- one consumer per consumer group whose offsets the mirror reads (`consumer_groups` says why
  not the admin client), configured with the group and never subscribed;
- one consumer, assigned and unassigned per lookup, only to read a record's timestamp (event
  time alignment);
- one producer (dead letters, `drainer produce`), flushed before the session closes.

The drain's topics are described once per session (partitions and topic ids in one request, never
the whole cluster's metadata) and the descriptions reused. The session's first request is the
first contact with the cluster, which fails fast and in one message when nobody answers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import (
    Consumer,
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
from drainer.kafka import consumer_groups, record_reads
from drainer.kafka.clients import (
    PRODUCER_DEFAULTS,
    RETRY_S,
    TIMEOUT_S,
    client_config,
    consumer_config,
    first_contact,
    kafka_error,
    make_client,
    read_committed,
    request_failed,
    retry_passing,
    unreachable,
)
from drainer.kafka.consumer_groups import GroupCommit
from drainer.settings import Settings

__all__ = ["GroupCommit", "KafkaSession", "Watermarks"]

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


class KafkaSession:
    """The Kafka clients of one run or command, for one drain's settings; a context manager.

    Not thread-safe: one run's steps use it one after another.
    """

    def __init__(self, drain: DrainConfig, settings: Settings) -> None:
        self.drain = drain
        # the run's settings: every client of the session dials the same brokers
        self.bootstrap = settings.bootstrap_servers
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._group_readers: dict[str, Consumer] = {}
        self._topics: dict[str, Any] = {}  # topic -> its description, None: it does not exist
        self._contacted = False  # the cluster answered a request of this session

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
        """Flush the producer, close the consumers, drop the admin client; safe to call twice."""
        producer, consumer = self._producer, self._consumer
        readers, self._group_readers = list(self._group_readers.values()), {}
        self._admin = self._consumer = self._producer = None
        self._topics, self._contacted = {}, False
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
            for client in [consumer, *readers]:
                if client is not None:
                    client.close()

    # the clients, each created on first use

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = make_client(AdminClient, client_config(self.drain, self.bootstrap))
        return self._admin

    @property
    def consumer(self) -> Consumer:
        """A group-less reader (its group id is never joined nor committed to)."""
        if self._consumer is None:
            config = consumer_config(
                self.drain,
                self.bootstrap,
                **{
                    "group.id": f"drainer-probe-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    # a lookup waits for the fetch in flight of the one before it: keep it short
                    "fetch.wait.max.ms": 10,
                },
            )
            self._consumer = make_client(Consumer, config)
        return self._consumer

    def group_reader(self, group: str) -> Consumer:
        """A consumer of `group` that only reads its committed offsets (never subscribes)."""
        if group not in self._group_readers:
            config = client_config(
                self.drain, self.bootstrap, **{"group.id": group, "enable.auto.commit": False}
            )
            self._group_readers[group] = make_client(Consumer, config)
        return self._group_readers[group]

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = make_client(
                Producer, client_config(self.drain, self.bootstrap, **PRODUCER_DEFAULTS)
            )
        return self._producer

    def _connected(self) -> AdminClient:
        """The admin client once the cluster answered: a cluster that does not fails fast."""
        if not self._contacted:
            self._describe([self.drain.level_topic(0)])
        return self.admin

    # topics

    def _describe(self, topics: Iterable[str]) -> dict[str, Any]:
        """topic -> its description (partitions, topic id), None if it does not exist.

        One DescribeTopics request for the topics not yet described in this session, never the
        whole cluster's metadata (a large cluster's costs more the more topics it has). The
        session's first request is the first contact: it fails fast when nobody answers.
        """
        topics = list(topics)
        wanted = sorted({t for t in topics if t not in self._topics})
        if wanted:
            futures = self.admin.describe_topics(TopicCollection(wanted), request_timeout=TIMEOUT_S)
            for name, future in futures.items():
                try:
                    if not self._contacted:
                        self._topics[name] = first_contact(self.admin, future, self.bootstrap)
                        self._contacted = True
                    else:
                        self._topics[name] = future.result(timeout=TIMEOUT_S + 5)
                except KafkaException as err:
                    if err.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise request_failed(
                            f"describing topic {name}", err, self.bootstrap
                        ) from None
                    self._contacted = True
                    self._topics[name] = None
                except TimeoutError as err:
                    raise unreachable(err, self.bootstrap) from None
        return {t: self._topics[t] for t in topics}

    def partitions(self, levels: Iterable[int]) -> dict[int, list[int]]:
        """Partition numbers of each level topic; missing topics are one TopicMissing."""
        names = {level: self.drain.level_topic(level) for level in levels}
        found = self._describe(names.values())
        missing = sorted(name for name, topic in found.items() if topic is None)
        if missing:
            raise TopicMissing(self.drain.name, missing)
        return {
            level: sorted(p.id for p in found[name].partitions) for level, name in names.items()
        }

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int | None]:
        """topic -> how many partitions it has, None for a topic that does not exist."""
        found = self._describe(topics)
        return {name: None if t is None else len(t.partitions) for name, t in found.items()}

    def topic_ids(self, topics: list[str]) -> dict[str, str]:
        """topic -> its Kafka topic id (text); a topic deleted and created again gets a new one."""
        found = self._describe(topics)
        missing = sorted(name for name, topic in found.items() if topic is None)
        if missing:
            raise TopicMissing(self.drain.name, missing)
        return {name: str(topic.topic_id) for name, topic in found.items()}

    def create_topics(self, extra: Iterable[str] = (), compacted: Iterable[str] = ()) -> list[str]:
        """Create the drain's level topics (and e.g. its DLQ topic); existing ones are left alone.
        Those of `extra` in `compacted` are made with `cleanup.policy=compact`."""
        compact = set(compacted)
        drain = self.drain
        wanted = [drain.level_topic(lvl) for lvl in range(drain.levels)] + list(extra)
        found = self._describe(wanted)
        new = [
            NewTopic(
                name,
                num_partitions=drain.partitions,
                replication_factor=drain.replication_factor,
                config={"cleanup.policy": "compact"} if name in compact else {},
            )
            for name in wanted
            if found[name] is None
        ]
        if not new:
            return []
        for name, future in self.admin.create_topics(new, request_timeout=TIMEOUT_S).items():
            try:
                future.result(timeout=TIMEOUT_S + 5)
            except TimeoutError as err:
                raise unreachable(err, self.bootstrap) from None
            except KafkaException as err:
                if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise kafka_error(f"creating topic {name}: {err}", err) from None
        created = [topic.topic for topic in new]
        self._await_topics(created)
        return created

    def _await_topics(self, names: list[str]) -> None:
        """Return once new topics are described with a leader for every partition.

        A topic exists for the controller before the brokers' metadata knows it; whoever uses
        it next (a run, a producer) must not find it missing.
        """
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            for name in names:
                self._topics.pop(name, None)
            found = self._describe(names)
            ready = all(
                topic is not None and all(p.leader is not None for p in topic.partitions)
                for topic in found.values()
            )
            if ready or time.monotonic() > deadline:
                return
            time.sleep(RETRY_S)

    # offsets in the log

    def list_offsets(
        self,
        requests: Sequence[tuple[Mapping[tuple[str, int], OffsetSpec], IsolationLevel]],
    ) -> list[dict[tuple[str, int], int]]:
        """Several batched ListOffsets requests, in flight together on the admin client.

        With READ_COMMITTED, `latest` is the last stable offset: below the first open transaction.
        """
        if not any(specs for specs, _ in requests):
            return [{} for _ in requests]
        admin = self._connected()

        def list_all() -> list[dict[tuple[str, int], int]]:
            pending = [
                admin.list_offsets(
                    {TopicPartition(t, part): spec for (t, part), spec in specs.items()},
                    isolation_level=isolation,
                    request_timeout=TIMEOUT_S,
                )
                if specs
                else {}
                for specs, isolation in requests
            ]
            return [self._offsets(futures) for futures in pending]

        topics = sorted({t for specs, _ in requests for t, _ in specs})

        def refresh() -> None:  # the leaders and epochs the admin client sends are its cache's
            for topic in topics:
                found = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
                # a topic deleted meanwhile also has "no leaders": not worth waiting for
                if found is None or (
                    found.error is not None
                    and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                ):
                    raise TopicMissing(self.drain.name, [topic])

        try:
            # retried: a partition without a leader for a moment (a new topic, a broker
            # restarting), or leader epochs the cluster moved past (a broker that crashed)
            return retry_passing(list_all, refresh)
        except KafkaException as err:
            raise request_failed("listing offsets", err, self.bootstrap) from None
        except TimeoutError as err:
            raise unreachable(err, self.bootstrap) from None

    def _offsets(self, futures: Mapping[Any, Any]) -> dict[tuple[str, int], int]:
        found = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result(timeout=TIMEOUT_S + 5).offset
            except KafkaException as err:
                if err.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:  # deleted meanwhile
                    raise TopicMissing(self.drain.name, [tp.topic]) from None
                raise
        return found

    def watermarks(self, partitions: Mapping[int, list[int]]) -> dict[tuple[int, int], Watermarks]:
        """(level, partition) -> earliest, plannable end and log end offsets."""
        drain = self.drain
        keys = [(drain.level_topic(lvl), p) for lvl, parts in partitions.items() for p in parts]
        # confluent-kafka leaves OffsetSpec's factories unannotated
        latest = {k: OffsetSpec.latest() for k in keys}  # type: ignore[no-untyped-call]
        requests = [
            (
                {k: OffsetSpec.earliest() for k in keys},  # type: ignore[no-untyped-call]
                IsolationLevel.READ_UNCOMMITTED,
            ),
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
        """Timestamp (ms) of the record at each (level, partition) offset (`record_reads`)."""
        return record_reads.record_timestamps(self.consumer, self.drain.level_topic, positions)

    def sample_record_sizes(
        self, positions: Mapping[tuple[int, int], int], count: int = 20
    ) -> dict[tuple[int, int], float]:
        """Average key+value+header bytes of up to `count` records per (level, partition) offset."""
        return record_reads.sample_record_sizes(
            self.consumer, self.drain.level_topic, positions, count
        )

    # consumer groups (the mirror of committed offsets)

    def group_offsets(
        self, groups: Mapping[str, Iterable[tuple[str, int]]]
    ) -> dict[str, dict[tuple[str, int], tuple[int, str]]]:
        """group -> (topic, partition) -> (offset, metadata); offset < 0: nothing committed."""
        self._connected()  # a cluster that does not answer fails fast, in one message
        return consumer_groups.read_offsets(self.group_reader, groups, self.bootstrap)

    def commit_group_offsets(
        self, commits: Mapping[str, list[GroupCommit]]
    ) -> dict[str, KafkaUnavailable]:
        """Commit offsets to consumer groups, all at once; returns the groups that failed."""
        return consumer_groups.commit_offsets(self._connected(), commits, self.bootstrap)
