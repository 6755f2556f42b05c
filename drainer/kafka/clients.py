"""Kafka I/O for planning and mirroring: watermarks, offsets-for-times, group offsets, topics.

Plain confluent-kafka configuration dicts. Consumers read with `isolation.level=read_committed`
and plans end at the last stable offset, so aborted records and transaction markers are
never read nor counted as backlog.

Client settings come from the drain's `kafka:` and `kafka_librdkafka:` blocks, translated by
`drainer.config.kafka_clients`. librdkafka's own log goes through Python logging (`drainer.librdkafka`)
at WARNING and above, each line once a minute at most, with secrets redacted; connection
failures it retries are DEBUG, because an operation that gives up says so itself, in one
message: the first contact with the cluster waits at most FIRST_CONTACT_S and names the cause
librdkafka reported (refused, authentication, TLS).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from drainer.config import DrainConfig
from drainer.config.kafka_clients import librdkafka_settings, redact
from drainer.errors import ConfigError, KafkaUnavailable
from drainer.settings import load_settings

TIMEOUT_S = 15.0
FIRST_CONTACT_S = 3.0  # a cluster that answers at all returns metadata in milliseconds
FIRST_CONTACT_SLICE_S = 0.5
ALL_DOWN_GRACE_S = 1.0  # every broker refused for this long: not a restart in progress
DEDUP_WINDOW_S = 60.0

_log = logging.getLogger("drainer.librdkafka")
# syslog levels librdkafka uses -> Python's
_LEVELS = {0: 50, 1: 50, 2: 50, 3: 40, 4: 30, 5: 20, 6: 20, 7: 10}
# librdkafka retries these by itself; the operation that gives up reports them
_RETRIED = re.compile(r"Connect to .* failed|Connection refused|brokers are down|Disconnected")
_NUMBERS = re.compile(r"\d+")


class _LibrdkafkaLog:
    """librdkafka's log lines (`logger` setting) as Python logging, redacted and deduplicated.

    Also the clients' `error_cb`: the errors librdkafka reports are kept, so that a timeout
    can say why (authentication failed, TLS handshake, connection refused) in one line.
    """

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self.errors: list[Any] = []

    def log(self, level: int, fmt: str, *args: Any) -> None:
        text = redact(fmt % args if args else fmt)
        if level >= logging.ERROR and _RETRIED.search(text):
            level = logging.DEBUG
        if level < logging.WARNING and not _log.isEnabledFor(level):
            return
        shape = _NUMBERS.sub("#", text)  # "(after 0ms …)" and counters differ between repeats
        now = time.monotonic()
        with self._lock:
            if now - self._seen.get(shape, -DEDUP_WINDOW_S) < DEDUP_WINDOW_S:
                return
            self._seen[shape] = now
        _log.log(level, "%s", text)

    def error(self, err: Any) -> None:
        with self._lock:
            self.errors = [*self.errors[-20:], err]

    def hopeless(self, waited: float) -> bool:
        """Waiting longer cannot help: the login was refused, or no broker took a connection."""
        with self._lock:
            codes = {err.code() for err in self.errors}
        if codes & {KafkaError._AUTHENTICATION, KafkaError._SSL}:
            return True
        return KafkaError._ALL_BROKERS_DOWN in codes and waited >= ALL_DOWN_GRACE_S

    def cause(self) -> str | None:
        """The most telling error librdkafka reported: authentication and TLS before transport."""
        with self._lock:
            errors = list(self.errors)
        for err in reversed(errors):
            if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
                return redact(err.str())
        for err in reversed(errors):
            if err.code() != KafkaError._ALL_BROKERS_DOWN:
                return redact(err.str())
        return None


_librdkafka_log = _LibrdkafkaLog()


def client_config(drain: DrainConfig | None = None, **extra: Any) -> dict[str, Any]:
    """Client settings: the bootstrap address, the drain's translated settings, `extra`."""
    config: dict[str, Any] = {
        "bootstrap.servers": load_settings().bootstrap_servers,
        "logger": _librdkafka_log,
        "log_level": 4,  # warning; `kafka_librdkafka: {log_level: 7, debug: ...}` for more
        "error_cb": _librdkafka_log.error,
    }
    if drain is not None:
        config.update(librdkafka_settings(drain))
    config.update(extra)
    return config


def _consumer(drain: DrainConfig | None, **extra: Any) -> Consumer:
    return make_client(Consumer, consumer_config(drain, **extra))


def read_committed(drain: DrainConfig | None) -> bool:
    """Whether the drain reads only committed transactional records (the default).

    With it, aborted records and transaction markers are never read, and plans end at the last
    stable offset; a drain may opt out with `isolation.level: read_uncommitted` in `kafka:`.
    """
    level = (drain.kafka if drain is not None else {}).get("isolation.level", "read_committed")
    return str(level) != "read_uncommitted"


def consumer_config(drain: DrainConfig | None = None, **extra: Any) -> dict[str, Any]:
    """A librdkafka consumer's settings: `read_committed` unless the drain's `kafka:` says otherwise."""
    level = "read_committed" if read_committed(drain) else "read_uncommitted"
    return {**client_config(drain, **extra), "isolation.level": level}


def admin(drain: DrainConfig | None = None) -> AdminClient:
    return make_client(AdminClient, client_config(drain))


def make_client(kind: Any, config: dict[str, Any]) -> Any:
    """A librdkafka client; settings it refuses are a ConfigError naming them, not a traceback."""
    try:
        return kind(config)
    except KafkaException as err:
        raise ConfigError(
            f"librdkafka refused the Kafka settings: {redact(err.args[0].str())}. Check the "
            "drain's `kafka:` and `kafka_librdkafka:` blocks (Java-only settings go in "
            "`kafka_java:`)"
        ) from None


def _unreachable(err: Exception | str) -> KafkaUnavailable:
    address = load_settings().bootstrap_servers
    cause = _librdkafka_log.cause()
    detail = cause or (err.args[0].str() if isinstance(err, KafkaException) else str(err))
    return KafkaUnavailable(
        redact(
            f"Kafka at {address} did not answer ({detail}). Start it with `drainer services up`, "
            "point KAFKA_BOOTSTRAP_SERVERS at your brokers, or check the drain's `kafka:` "
            "security settings."
        )
    )


def cluster_metadata(client: AdminClient) -> Any:
    """The first call to a cluster: metadata within FIRST_CONTACT_S, or one clear error.

    Asked in short slices, so that a refused connection (every broker down for a second) or a
    refused login ends the wait early instead of running out the clock.
    """
    _librdkafka_log.errors = []
    started = time.monotonic()
    while True:
        try:
            return client.list_topics(timeout=FIRST_CONTACT_SLICE_S)
        except KafkaException as err:
            client.poll(0)  # serve the error callbacks that say why
            waited = time.monotonic() - started
            if waited >= FIRST_CONTACT_S or _librdkafka_log.hopeless(waited):
                raise _unreachable(err) from None


def partitions_of(drain: DrainConfig, levels: Iterable[int]) -> dict[int, list[int]]:
    """Partition numbers of each level topic; a missing topic is a clear error."""
    client = admin(drain)
    metadata = cluster_metadata(client)
    found: dict[int, list[int]] = {}
    for level in levels:
        topic = metadata.topics.get(drain.level_topic(level))
        if topic is None or topic.error is not None:
            raise KafkaUnavailable(
                f"topic {drain.level_topic(level)} does not exist: create the level topics "
                f"with `drainer topics create {drain.name}`"
            )
        found[level] = sorted(topic.partitions)
    return found


def list_offsets(
    drain: DrainConfig,
    specs: Mapping[tuple[str, int], OffsetSpec],
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[tuple[str, int], int]:
    """One batched ListOffsets request for many partitions (planning cost grows with partitions).

    With READ_COMMITTED, `latest` is the last stable offset: below the first open transaction.
    """
    return _list_offsets_at_once(drain, [(specs, isolation)])[0]


def _list_offsets_at_once(
    drain: DrainConfig,
    requests: list[tuple[Mapping[tuple[str, int], OffsetSpec], IsolationLevel]],
) -> list[dict[tuple[str, int], int]]:
    """Several ListOffsets requests in flight together on one admin client.

    A client per request paid its own connection and metadata round trip (~0.1 s each, three
    per `watermarks`, on every plan).
    """
    if not any(specs for specs, _ in requests):
        return [{} for _ in requests]
    client = admin(drain)  # must outlive its futures: they resolve on the client's thread
    try:
        pending = [
            client.list_offsets(
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
        raise _unreachable(err) from None


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


def watermarks(
    drain: DrainConfig, partitions: Mapping[int, list[int]]
) -> dict[tuple[int, int], Watermarks]:
    """(level, partition) -> earliest, plannable end and log end offsets."""
    keys = [(drain.level_topic(lvl), p) for lvl, parts in partitions.items() for p in parts]
    latest = {k: OffsetSpec.latest() for k in keys}
    requests = [
        ({k: OffsetSpec.earliest() for k in keys}, IsolationLevel.READ_UNCOMMITTED),
        (latest, IsolationLevel.READ_UNCOMMITTED),
    ]
    if read_committed(drain):
        requests.append((latest, IsolationLevel.READ_COMMITTED))
    low, log_end, *committed = _list_offsets_at_once(drain, requests)
    high = committed[0] if committed else log_end
    found = {}
    for level, parts in partitions.items():
        for part in parts:
            key = (drain.level_topic(level), part)
            found[(level, part)] = Watermarks(low[key], high[key], log_end[key])
    return found


def topic_ids(drain: DrainConfig, topics: list[str]) -> dict[str, str]:
    """topic -> its Kafka topic id (text); a topic deleted and created again gets a new one."""
    if not topics:
        return {}
    client = admin(drain)  # must outlive its futures
    try:
        futures = client.describe_topics(TopicCollection(topics), request_timeout=TIMEOUT_S)
        return {
            name: str(fut.result(timeout=TIMEOUT_S + 5).topic_id) for name, fut in futures.items()
        }
    except TimeoutError as err:
        raise _unreachable(err) from None
    except KafkaException as err:
        if err.args and err.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaUnavailable(
                f"a topic of drain '{drain.name}' does not exist ({err}): create the level "
                f"topics with `drainer topics create {drain.name}`"
            ) from None
        raise _unreachable(err) from None


def offsets_for_time(
    drain: DrainConfig, requests: Mapping[tuple[int, int], int], ends: Mapping[tuple[int, int], int]
) -> dict[tuple[int, int], int]:
    """First offset whose timestamp is >= the given ms per (level, partition); the end if none."""
    specs = {
        (drain.level_topic(level), part): OffsetSpec.for_timestamp(ts)
        for (level, part), ts in requests.items()
    }
    found = list_offsets(drain, specs)
    result = {}
    for level, part in requests:
        offset = found[(drain.level_topic(level), part)]
        result[(level, part)] = ends[(level, part)] if offset < 0 else offset
    return result


def _probe(
    drain: DrainConfig, positions: Mapping[tuple[int, int], int]
) -> tuple[Consumer, dict[tuple[str, int], tuple[int, int]]]:
    """A throwaway consumer assigned at each (level, partition) offset, reporting partition
    ends; and (topic, partition) -> (level, partition) of what it reads. The caller closes it."""
    consumer = _consumer(
        drain,
        **{
            "group.id": f"drainer-probe-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        },
    )
    consumer.assign(
        [TopicPartition(drain.level_topic(lvl), p, off) for (lvl, p), off in positions.items()]
    )
    return consumer, {(drain.level_topic(lvl), p): (lvl, p) for (lvl, p) in positions}


def record_timestamps(
    drain: DrainConfig, positions: Mapping[tuple[int, int], int]
) -> dict[tuple[int, int], int | None]:
    """Timestamp (ms) of the record at each (level, partition) offset: the next pending one.

    Reads one record per partition; used only when a drain aligns by event time (`max_gap`).
    """
    if not positions:
        return {}
    consumer, wanted = _probe(drain, positions)
    try:
        found: dict[tuple[int, int], int | None] = {}
        deadline = time.monotonic() + TIMEOUT_S
        while wanted and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            key = (message.topic(), message.partition())
            if key not in wanted:
                continue
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise KafkaUnavailable(f"reading {key}: {error}")
            kind, stamp = (TIMESTAMP_NOT_AVAILABLE, -1) if error else message.timestamp()
            # at the end, or no usable timestamp (old message format): unknown, so it cannot
            # define t_min
            known = kind != TIMESTAMP_NOT_AVAILABLE and stamp >= 0
            found[wanted.pop(key)] = stamp if known else None
            consumer.pause([TopicPartition(*key)])
        for key in wanted.values():
            found[key] = None
        return found
    finally:
        consumer.close()


def sample_record_sizes(
    drain: DrainConfig, positions: Mapping[tuple[int, int], int], count: int = 20
) -> dict[tuple[int, int], float]:
    """Average key+value bytes of up to `count` records from each (level, partition) offset.

    A byte budget's estimate for partitions no measured run has read yet (`budget_bytes`);
    a partition whose sample found no record is absent.
    """
    if not positions:
        return {}
    consumer, wanted = _probe(drain, positions)
    try:
        sizes: dict[tuple[int, int], list[int]] = {key: [] for key in positions}
        deadline = time.monotonic() + TIMEOUT_S
        while wanted and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or (message.topic(), message.partition()) not in wanted:
                continue
            key = (message.topic(), message.partition())
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise KafkaUnavailable(f"reading {key}: {error}")
            if error is None:
                sizes[wanted[key]].append(len(message.key() or b"") + len(message.value() or b""))
            if error is not None or len(sizes[wanted[key]]) >= count:
                wanted.pop(key)
                consumer.pause([TopicPartition(*key)])
        return {key: sum(found) / len(found) for key, found in sizes.items() if found}
    finally:
        consumer.close()


@dataclass(frozen=True)
class GroupCommit:
    topic: str
    partition: int
    offset: int
    metadata: str = ""


def commit_group_offsets(drain: DrainConfig, group: str, commits: list[GroupCommit]) -> None:
    """Mirror committed offsets to a Kafka consumer group so lag tools see the drain's progress."""
    if not commits:
        return
    consumer = _consumer(drain, **{"group.id": group, "enable.auto.commit": False})
    try:
        offsets = [TopicPartition(c.topic, c.partition, c.offset, c.metadata) for c in commits]
        result = consumer.commit(offsets=offsets, asynchronous=False)
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            raise KafkaUnavailable(f"committing offsets of group {group}: {failed[0].error}")
    except KafkaException as err:
        raise _unreachable(err) from None
    finally:
        consumer.close()


def group_offsets(drain: DrainConfig, group: str, keys: list[tuple[str, int]]) -> dict:
    """(topic, partition) -> (offset, metadata) of a consumer group; for status and tests."""
    consumer = _consumer(drain, **{"group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=TIMEOUT_S)
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in found}
    except KafkaException as err:
        raise _unreachable(err) from None
    finally:
        consumer.close()


def create_topics(drain: DrainConfig, extra: Iterable[str] = ()) -> list[str]:
    """Create the drain's level topics (and e.g. its DLQ topic); existing ones are left alone."""
    client = admin(drain)
    existing = set(cluster_metadata(client).topics)
    wanted = [drain.level_topic(lvl) for lvl in range(drain.levels)] + list(extra)
    new = [
        NewTopic(name, num_partitions=drain.partitions, replication_factor=drain.replication_factor)
        for name in wanted
        if name not in existing
    ]
    if not new:
        return []
    for name, future in client.create_topics(new, request_timeout=TIMEOUT_S).items():
        try:
            future.result(timeout=TIMEOUT_S + 5)
        except TimeoutError as err:
            raise _unreachable(err) from None
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaUnavailable(f"creating topic {name}: {err}") from None
    return [topic.topic for topic in new]
