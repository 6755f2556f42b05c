"""The sink interface: what a sink promises a run, and the values it hands back.

A sink is where a drain's output lands. Each format is one class (drainer.sinks.postgres,
.delta, .iceberg) that says, through its `capabilities`, how its commit relates to the run's
Postgres commit, and implements the driver side of a run:

- `prepare_attempt`: before an attempt executes, drop what an earlier attempt left that is not
  the run's (a Postgres stage; failures that no table commit took);
- `publish`: inside the Postgres commit transaction, make the run's output visible (Postgres:
  attach the stage) or account for a table commit made before it (Delta, Iceberg);
- `discard`: an abandoned plan's leftovers;
- `upkeep` after every commit and `maintain` to the end (`drainer maintain`);
- where it lives (`location`, `describe`, `data_folder`) and what Spark needs to write it
  (`spark_formats` jars and extensions, `session_key` for catalogs).

The Spark half (write, find a run's commit, compact a table) extends these classes in
`spark_jobs/sinks/`. Nothing outside the two sink packages asks which format a sink is: it asks
the sink. The design note of record is docs/design.md ("Sinks").
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar
from urllib.parse import urlparse

from sqlalchemy import Connection, Engine

from drainer.settings import Settings
from drainer.store import dead_letters
from drainer.store.runs import StoredRun

ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class Capabilities:
    """What a run may expect of a sink, read instead of asking for its format.

    `commit`: `in_postgres`, the output is published inside the Postgres commit transaction
    (one transaction, nothing else to prove); `before_postgres`, the sink commits first, tagged
    with the run, and a resumed run must ask it whether that commit landed.
    """

    commit: Literal["in_postgres", "before_postgres"]
    record_mode: bool = True
    # maven coordinates the Spark server needs for this format, and its SQL extension
    jars: tuple[str, ...] = ()
    spark_extension: str | None = None
    # static Spark settings the server starts with for this format (set when the JVM starts)
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    # `drainer maintain` has table work to do on Spark (compaction, expiry)
    table_maintenance: bool = False
    # what a table commit's id is called (`drainer status`): a version, a snapshot
    commit_id: str = "version"


@dataclass(frozen=True)
class TableCommit:
    """A table commit the sink made for a run, before the Postgres commit: the proof a resumed
    run finds, and what `drainer status` and the Dagster metadata show."""

    format: str
    location: str
    version: int  # Delta table version or Iceberg snapshot id
    files_added: int
    bytes_added: int
    rows_added: int
    # the attempt of the run whose write this is: its staged failures are the commit's
    attempt: int = 0
    # format-specific facts to show (a Kafka sink: records per topic, the transactional id)
    details: Mapping[str, Any] = field(default_factory=dict)
    # set when the commit also carried the attempt's dead letters to the drain's DLQ topic
    # (the Kafka sink's transaction), decided with this max_attempts: the Postgres commit
    # decides them the same way and records them published
    dlq_max_attempts: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The commit as recorded and shown (`run_table_commits`, status, Dagster metadata)."""
        data = asdict(self)
        del data["attempt"]
        if self.dlq_max_attempts is None:  # no dead letters in the sink's commit
            del data["dlq_max_attempts"]
        if not self.details:  # a table format's commit: no details, none stored
            del data["details"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TableCommit | None:
        if not data:
            return None
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class UpkeepReport:
    """What keeping a sink bounded did: its partitions before and after, the folds made."""

    table: str
    before: int = 0
    after: int = 0
    folds: int = 0
    runs_folded: int = 0


class Sink(abc.ABC, Generic[ConfigT]):
    """The driver side of a sink: one instance per drain and settings, cheap to make."""

    type: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(self, config: ConfigT, settings: Settings) -> None:
        self.config = config
        self.settings = settings

    @property
    def kind(self) -> str:
        """The format's name as a label (Dagster's kind tag, `drainer status`): to show, not to
        branch on; a run reads `capabilities` instead."""
        return self.type

    # where it lives

    @abc.abstractmethod
    def location(self) -> str:
        """The one place that says where the output lives: a table name, a path, a URI."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The sink in words, e.g. `Delta table /data/orders`."""

    def uri(self) -> str:
        """The output as a URI without credentials, the name an orchestrator's asset or a
        lineage tool gives it (Airflow's outlet assets): a URI location as it is, a local path
        as `file://`, else `<format>://<location>`."""
        where = self.location()
        if is_uri(where):
            return where
        if Path(where).is_absolute():
            return Path(where).as_uri()
        return f"{self.type}://{where}"

    def data_folder(self) -> Path | None:
        """The local folder holding the table's files, or None (fault injection, tests)."""
        return None

    def session_key(self) -> str:
        """What a shared Spark session must not mix between drains (a catalog's settings)."""
        return ""

    def check_writable(self) -> None:  # noqa: B027  (most sinks have nothing to check)
        """Before anything is read: a ConfigError if this machine cannot write the sink."""

    # a run, driver side

    @abc.abstractmethod
    def prepare_attempt(
        self, conn: Connection, run: StoredRun, read_from: Mapping[tuple[str, int], int]
    ) -> None:
        """Before an attempt executes (fenced, in `conn`'s transaction): drop what earlier
        attempts left that is not the run's, so a commit never publishes a crashed stage."""

    @abc.abstractmethod
    def publish(self, conn: Connection, run_id: int, commit: TableCommit | None) -> int:
        """Inside the Postgres commit transaction: the rows the run published."""

    @abc.abstractmethod
    def discard(self, conn: Connection, run_id: int) -> None:
        """An abandoned plan: drop what its attempts staged."""

    def upkeep(self, engine: Engine) -> UpkeepReport:
        """After every commit, bounded in time: keep the sink small (a failure is a warning)."""
        return UpkeepReport(self.location())

    def maintain(self, engine: Engine) -> UpkeepReport:
        """`drainer maintain`, under the drain's lease: the upkeep done to the end."""
        return UpkeepReport(self.location())


class TableSink(Sink[ConfigT]):
    """A table format committed by Spark before the Postgres commit, tagged with the run."""

    def prepare_attempt(
        self, conn: Connection, run: StoredRun, read_from: Mapping[tuple[str, int], int]
    ) -> None:
        # No stage. Failures an earlier attempt staged belong to its table commit if that
        # happened, so the executor clears them only when it writes again. Those of records
        # retention deleted since are lost, not failed: counted as failed they made `drained`
        # (read - not done) negative, 0 - 1 when every record was deleted
        for rng in run.ranges:
            start = read_from.get((rng.topic, rng.partition), rng.start)
            dead_letters.clear_failures_below(conn, run.id, rng.topic, rng.partition, start)

    def publish(self, conn: Connection, run_id: int, commit: TableCommit | None) -> int:
        return 0 if commit is None else commit.rows_added

    def discard(self, conn: Connection, run_id: int) -> None:
        """Nothing staged in Postgres; the table holds no write of an unpublished attempt."""


def is_uri(path: str) -> bool:
    return bool(urlparse(path).scheme) and "://" in path


def warehouse_uri(settings: Settings) -> str:
    """The warehouse as a URI Spark and the catalogs take (`file://` for a folder)."""
    if is_uri(settings.warehouse):
        return settings.warehouse.rstrip("/")
    return Path(settings.warehouse).expanduser().resolve().as_uri()


def local_folder(where: str) -> Path | None:
    """A location on this machine's file system as a folder; None for an object store."""
    if where.startswith("file://"):
        return Path(urlparse(where).path)
    return None if "://" in where else Path(where)


__all__ = [
    "Capabilities",
    "Sink",
    "TableCommit",
    "TableSink",
    "UpkeepReport",
    "is_uri",
    "local_folder",
    "warehouse_uri",
]
