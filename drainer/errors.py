"""Every error drainer raises on purpose, under one root that carries the CLI's exit code.

An error here is one a user can act on: its message names the setting, service or record and
says what to do. Anything else that escapes is a bug and keeps its traceback. `drainer.cli.main`
maps these to exit codes in one place (2 by default, 3 when another run holds the drain).

Errors raised inside Spark tasks travel back to the driver pickled; `__reduce__` rebuilds them
from their message, so a subclass with a custom `__init__` cannot lose it on the way.
"""

from __future__ import annotations


class DrainerError(Exception):
    """Root of drainer's errors; `exit_code` is what the CLI exits with."""

    exit_code: int = 2

    def __reduce__(self):  # survive pickling out of a Spark task with the message intact
        return (_rebuild, (type(self), self.args))


def _rebuild(cls: type[DrainerError], args: tuple) -> DrainerError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


class ConfigError(DrainerError, ValueError):
    """The drains file or a command's arguments are wrong; the message names the setting."""


class ServiceUnavailable(DrainerError):
    """A service drainer needs did not answer; nothing was changed."""


class KafkaUnavailable(ServiceUnavailable):
    """The Kafka broker did not answer, or refused a request; nothing was changed."""


class DatabaseUnavailable(ServiceUnavailable):
    """Postgres cannot be reached; nothing was changed."""


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


class PlanKeepsFailing(DrainerError):
    """An open plan failed again on resume; the message counts attempts and names the way out."""


class ProcessorFailed(DrainerError):
    """The drain's processor raised: its error and frames, the plan kept for the next run."""
