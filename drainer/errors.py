"""Every error drainer raises on purpose, under one root that carries the CLI's exit code.

An error here is one a user can act on: its message names the setting, service or record and
says what to do. Anything else that escapes is a bug and keeps its traceback. `drainer.cli.main`
maps these to exit codes in one place (2 by default, 3 when another run holds the drain).

Errors raised inside Spark tasks travel back to the driver pickled; `__reduce__` rebuilds them
from their message and attributes, so a subclass with a custom `__init__` cannot lose either on
the way.
"""

from __future__ import annotations

from typing import Any


class DrainerError(Exception):
    """Root of drainer's errors; `exit_code` is what the CLI exits with."""

    exit_code: int = 2

    def __reduce__(self) -> tuple[Any, ...]:  # survive pickling out of a Spark task intact
        return (_rebuild, (type(self), self.args, dict(vars(self))))


def _rebuild(
    cls: type[DrainerError], args: tuple[Any, ...], attributes: dict[str, Any] | None = None
) -> DrainerError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    vars(error).update(attributes or {})
    return error


class ConfigError(DrainerError, ValueError):
    """The drains file or a command's arguments are wrong; the message names the setting."""


class ServiceUnavailable(DrainerError):
    """A service drainer needs did not answer; nothing was changed."""


class KafkaUnavailable(ServiceUnavailable):
    """The Kafka broker did not answer, or refused a request; nothing was changed.

    `code` is the name of Kafka's error (`UNKNOWN_TOPIC_OR_PART`, `_TRANSPORT`, `_TIMED_OUT`, …)
    when Kafka or librdkafka gave one, and `retriable` whether Kafka says the same request can
    succeed later unchanged (a broker restarting) rather than needing a fix first (a refused
    login, a missing topic).
    """

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable


class TopicMissing(KafkaUnavailable):
    """A topic the drain reads or writes does not exist; `topics` names them."""

    def __init__(self, drain: str, topics: list[str]) -> None:
        names = ", ".join(topics)
        noun = "topic" if len(topics) == 1 else "topics"
        verb = "does" if len(topics) == 1 else "do"
        super().__init__(
            f"{noun} {names} of drain '{drain}' {verb} not exist: create the drain's topics with "
            f"`drainer topics create {drain}`",
            code="UNKNOWN_TOPIC_OR_PART",
            retriable=False,  # Kafka calls it retriable; here nothing changes until it is created
        )
        self.drain = drain
        self.topics = list(topics)


class DatabaseUnavailable(ServiceUnavailable):
    """Postgres cannot be reached; nothing was changed."""


class SparkUnavailable(ServiceUnavailable):
    """The Spark Connect server stopped answering (or restarted) under a run; nothing was
    committed in Postgres."""


class CatalogUnavailable(ServiceUnavailable):
    """A lakehouse sink's Iceberg catalog did not answer; nothing was committed."""


class ServiceError(ServiceUnavailable):
    """A local development service could not be prepared, started, reached or stopped."""


class ResolutionError(ServiceError):
    """Maven ran but could not resolve the requested artifacts (a fallback may still work)."""


class DrainBusy(DrainerError):
    """Another run holds the drain; nothing was changed."""

    exit_code = 3


class FencedOut(DrainerError):
    """A newer run took the drain: this (zombie) run must not write or commit."""


class CommitConflict(DrainerError):
    """Committed offsets moved under the run; its results were not published."""


class OffsetMapError(DrainerError, ValueError):
    """A stored offset map cannot be decoded: never read as an empty map."""


class TopicRecreated(DrainerError):
    """A level topic is not the one the drain read (new topic id, or offsets past its end)."""


class CommitProofLost(DrainerError):
    """A sink that commits before Postgres can no longer say whether a run's write landed (its
    history was expired outside drainer): the run stops rather than write a second time."""


class PlanKeepsFailing(DrainerError):
    """An open plan failed again on resume; the message counts attempts and names the way out."""


class RunFailed(DrainerError):
    """A run attempt failed for a reason drainer has no error of its own for (a handler's
    exception through Spark, a database refusing a row): one line ending with the root cause;
    the plan stays open for the next run."""


class ProcessorFailed(DrainerError):
    """The drain's processor raised: its error and frames, the plan kept for the next run."""


class BadRecord(DrainerError):
    """A record's value did not decode with the drain's declared format (`bad_records: fail`):
    its topic, partition and offset and the reason; nothing was committed."""


class RedactedError(DrainerError):
    """An error on its way to storage drainer does not control (Dagster's event log): the
    original's type and message, and those of its causes, with every known secret redacted.

    Raised in place of the original (whose chained messages would travel unredacted); the
    traceback's frames are the original's (code lines, no values).
    """
