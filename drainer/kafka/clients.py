"""How drainer's confluent-kafka clients are configured, and how their failures read.

Plain confluent-kafka configuration dicts; the clients themselves live in a `KafkaSession`
(drainer.kafka.session), one per run or command. Consumers read with
`isolation.level=read_committed` and plans end at the last stable offset, so aborted records and
transaction markers are never read nor counted as backlog.

Client settings come from the drain's `kafka:` and `kafka_librdkafka:` blocks, translated by
`drainer.config.kafka_clients`. librdkafka's own log goes through Python logging (`drainer.librdkafka`)
at WARNING and above, each line once a minute at most, with secrets redacted; connection
failures it retries are DEBUG, because an operation that gives up says so itself, in one
message: the first contact with the cluster waits at most FIRST_CONTACT_S and names the cause
librdkafka reported (refused, authentication, TLS).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from drainer.config import DrainConfig
from drainer.config.kafka_clients import librdkafka_settings, redact
from drainer.errors import ConfigError, KafkaUnavailable

TIMEOUT_S = 15.0  # one request's time limit once the cluster answered
FIRST_CONTACT_S = 3.0  # a cluster that answers at all does so in milliseconds
FIRST_CONTACT_SLICE_S = 0.5
ALL_DOWN_GRACE_S = 1.0  # every broker refused for this long: not a restart in progress
DEDUP_WINDOW_S = 60.0
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
}

_log = logging.getLogger("drainer.librdkafka")
# syslog levels librdkafka uses -> Python's
_LEVELS = {0: 50, 1: 50, 2: 50, 3: 40, 4: 30, 5: 20, 6: 20, 7: 10}
# librdkafka retries these by itself; the operation that gives up reports them
_RETRIED = re.compile(r"Connect to .* failed|Connection refused|brokers are down|Disconnected")
# a just-started broker's transient answers, retried by librdkafka at once (the idempotent
# producer's GETPID while the transaction coordinator loads): detail, at any level
_TRANSIENT = re.compile(r"Coordinator load in progress|COORDINATOR_LOAD_IN_PROGRESS")
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
        if (level >= logging.ERROR and _RETRIED.search(text)) or _TRANSIENT.search(text):
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

    def cause(self) -> Any:
        """The most telling error librdkafka reported: authentication and TLS before transport."""
        with self._lock:
            errors = list(self.errors)
        for err in reversed(errors):
            if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
                return err
        for err in reversed(errors):
            if err.code() != KafkaError._ALL_BROKERS_DOWN:
                return err
        return None


_librdkafka_log = _LibrdkafkaLog()


def client_config(drain: DrainConfig | None, bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Client settings: the bootstrap address (the run's `Settings.bootstrap_servers`), the
    drain's translated settings, `extra`."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": _librdkafka_log,
        "log_level": 4,  # warning; `kafka_librdkafka: {log_level: 7, debug: ...}` for more
        "error_cb": _librdkafka_log.error,
    }
    if drain is not None:
        config.update(librdkafka_settings(drain))
    config.update(extra)
    return config


def read_committed(drain: DrainConfig | None) -> bool:
    """Whether the drain reads only the committed records of transactions (the default).

    With it, aborted records and transaction markers are never read, and plans end at the last
    stable offset; a drain may opt out with `isolation.level: read_uncommitted` in `kafka:`.
    """
    level = (drain.kafka if drain is not None else {}).get("isolation.level", "read_committed")
    return str(level) != "read_uncommitted"


def consumer_config(drain: DrainConfig | None, bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A librdkafka consumer's settings: `read_committed` unless the drain's `kafka:` says otherwise."""
    level = "read_committed" if read_committed(drain) else "read_uncommitted"
    return {**client_config(drain, bootstrap, **extra), "isolation.level": level}


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


def kafka_error(message: str, err: Any) -> KafkaUnavailable:
    """`message` as a KafkaUnavailable carrying the code and retriability of Kafka's error.

    `err` is a confluent_kafka.KafkaError, a KafkaException wrapping one, or anything else
    (a timeout: `_TIMED_OUT`, retriable).
    """
    err = _unwrapped(err)
    if isinstance(err, KafkaError):
        return KafkaUnavailable(redact(message), code=err.name(), retriable=retriable(err))
    return KafkaUnavailable(redact(message), code="_TIMED_OUT", retriable=True)


# codes that say the cluster (or the login to it) is out of reach, not that a request was refused
OUT_OF_REACH = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
}


# errors Kafka's protocol calls retriable; the errors of librdkafka's admin results do not say so
RETRIABLE = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS,
}


def retriable(err: Any) -> bool:
    """Whether the same request can succeed later, unchanged."""
    return bool(err.retriable()) or err.code() in RETRIABLE


def passing(err: Any) -> bool:
    """A request refused for a passing reason (a leader election): retry it at once."""
    err = _unwrapped(err)
    return isinstance(err, KafkaError) and retriable(err) and err.code() not in OUT_OF_REACH


RETRY_S = 0.1  # between attempts of a request refused for a passing reason
T = TypeVar("T")
# refusals that say the client's metadata is out of date: a leader moved, or a broker restarted
# after a crash (its partitions' leader epochs went up), and the client still sends the old ones
STALE_METADATA = {
    KafkaError._NOENT,  # librdkafka's admin found no leader in its cache ("No leaders found")
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
}


def stale_metadata(err: Any) -> bool:
    err = _unwrapped(err)
    return isinstance(err, KafkaError) and err.code() in STALE_METADATA


def retry_passing(request: Callable[[], T], refresh: Callable[[], object] | None = None) -> T:
    """`request()`, made again while Kafka refuses it for a passing reason (a leader election,
    a group coordinator loading or moving) for up to TIMEOUT_S; then its refusal is raised.

    `refresh()` runs before a retry of a request refused for stale metadata: librdkafka does not
    refresh it on such a refusal by itself, so the retries would be refused alike until its
    next periodic refresh (minutes)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return request()
        except KafkaException as err:
            refreshing = refresh if refresh is not None and stale_metadata(err) else None
            if not (refreshing or passing(err)) or time.monotonic() >= deadline:
                raise
            if refreshing is not None:
                with contextlib.suppress(KafkaException):  # the next attempt tells
                    refreshing()
        time.sleep(RETRY_S)


def request_failed(message: str, err: Any, address: str) -> KafkaUnavailable:
    """A failed request: the cluster at `address` out of reach is `unreachable`'s one message,
    else `message`."""
    err = _unwrapped(err)
    if not isinstance(err, KafkaError) or err.code() in OUT_OF_REACH:
        return unreachable(err if isinstance(err, Exception) else KafkaException(err), address)
    return kafka_error(f"{message}: {err.str()}", err)


def unreachable(err: Exception, address: str) -> KafkaUnavailable:
    """The cluster did not answer: one message naming the address, librdkafka's cause, the fix."""
    cause = _librdkafka_log.cause()
    detail = redact(cause.str()) if cause is not None else _text(err)
    return kafka_error(
        f"Kafka at {address} did not answer ({detail}). Start it with `drainer services up`, "
        "point KAFKA_BOOTSTRAP_SERVERS at your brokers, or check the drain's `kafka:` "
        "security settings.",
        cause if cause is not None else err,
    )


def _text(err: Exception) -> str:
    inner = _unwrapped(err)
    return str(inner.str()) if isinstance(inner, KafkaError) else str(err) or type(err).__name__


def _unwrapped(err: Any) -> Any:
    """The KafkaError a KafkaException carries; anything else as it is."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return err.args[0]
    return err


def first_contact(client: Any, future: Any, address: str) -> Any:
    """The first answer of a cluster: `future`'s result within FIRST_CONTACT_S, or one clear error.

    Waited for in short slices, so that a refused connection (every broker down for a second)
    or a refused login ends the wait early instead of running out the clock.
    """
    _librdkafka_log.errors = []
    started = time.monotonic()
    while True:
        try:
            return future.result(timeout=FIRST_CONTACT_SLICE_S)
        except TimeoutError as err:
            client.poll(0)  # serve the error callbacks that say why
            waited = time.monotonic() - started
            if waited >= FIRST_CONTACT_S or _librdkafka_log.hopeless(waited):
                raise unreachable(err, address) from None
