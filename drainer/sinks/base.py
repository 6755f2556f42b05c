"""The sink interface: what a sink promises a run, and the values it hands back.

A sink is where a drain's output lands. Each kind is one class (drainer.sinks.postgres,
.delta, .iceberg, .kafka) that says, through its `capabilities`, how its commit relates to the
run's Postgres commit, and implements the driver side of a run:

- `prepare_attempt`: before an attempt executes, drop what an earlier attempt left that is not
  the run's (a Postgres stage; failures that no sink commit took);
- `publish`: inside the Postgres commit transaction, make the run's output visible (Postgres:
  attach the stage) or account for a `SinkCommit` made before it (`CommitsFirst`: Delta,
  Iceberg, Kafka);
- `discard`: an abandoned plan's leftovers;
- `upkeep` after every commit and `maintain` to the end (`drainer maintain`, `upkeep_words`);
- how it reports a commit (`commit_line`; `capabilities.commit_id`, `files`, `rows`);
- where it lives (`location`, `describe`, `data_folder`) and what Spark needs to write it
  (`spark_formats` jars and extensions, `session_key` and `session_conf` for catalogs, set
  when a session is made, `server_jar` for code it runs in the Spark server's JVM).

The Spark half (write, find a run's commit, compact a table) extends these classes in
`spark_jobs/sinks/`. Nothing outside the two sink packages asks which format a sink is: it asks
the sink. The design note of record is docs/design.md ("Sinks").
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    # maven coordinates the Spark server needs for this format, and its SQL extension
    jars: tuple[str, ...] = ()
    spark_extension: str | None = None
    # static Spark settings the server starts with for this format (set when the JVM starts)
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    # `drainer maintain` has table work to do on Spark (compaction, expiry)
    table_maintenance: bool = False
    # what a commit's id is called (`drainer status`): a version, a snapshot, a transaction
    commit_id: str = "version"
    # a commit adds data files (a table format): `drainer status` counts them
    files: bool = False
    # what the sink's output rows are called (`drainer status`)
    rows: str = "rows"
    # the sink runs code of its own in the Spark server's JVM (`Sink.server_jar`)
    server_code: bool = False


@dataclass(frozen=True)
class ServerJar:
    """Code a sink runs in the Spark server's JVM: the jars for the server's own class path
    (a session's class loader would not share it between tasks), the conf the server starts
    with (how a run tells that the server has it), and the name a server records: one started
    with another name lacks this version and is restarted."""

    classpath: tuple[Path, ...]
    conf: Mapping[str, str]
    name: str


@dataclass(frozen=True)
class SinkCommit:
    """A commit a sink made for a run before the Postgres commit: the proof a resumed run
    finds, and what `drainer status` and the Dagster metadata show.

    Every sink fills the common fields as they are; what only one kind of sink has goes in
    `files` (a table format's data files) or `details` (a Kafka sink's records per topic,
    transactional id, producer).
    """

    format: str
    location: str
    id: int  # what `capabilities.commit_id` names: a Delta version, an Iceberg snapshot id,
    # the Kafka marker's offset
    rows: int  # the output's rows (records)
    bytes: int  # of the output
    files: int | None = None  # data files added (a table format); None: a sink without files
    # the attempt of the run whose write this is: its staged failures are the commit's
    attempt: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)
    # set when the commit also carried the attempt's dead letters to the drain's DLQ topic
    # (the Kafka sink's transaction), decided with this max_attempts: the Postgres commit
    # decides them the same way and records them published
    dlq_max_attempts: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The commit as recorded and shown (`run_table_commits`, status, Dagster metadata),
        in the recorded names (`version`, `files_added`, `bytes_added`, `rows_added`)."""
        data: dict[str, Any] = {
            "format": self.format,
            "location": self.location,
            "version": self.id,
            "bytes_added": self.bytes,
            "rows_added": self.rows,
        }
        if self.files is not None:
            data["files_added"] = self.files
        if self.details:
            data["details"] = dict(self.details)
        if self.dlq_max_attempts is not None:  # dead letters in the sink's commit
            data["dlq_max_attempts"] = self.dlq_max_attempts
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, files: bool = True) -> SinkCommit | None:
        """A recorded commit, as `as_dict` wrote it or as older versions did (whose Kafka
        commits stored the number of topics as `files_added`: read only when the sink's
        commits add `files`)."""
        if not data:
            return None
        return cls(
            str(data["format"]),
            str(data["location"]),
            int(data["version"]),
            int(data["rows_added"]),
            int(data["bytes_added"]),
            int(data["files_added"]) if files and data.get("files_added") is not None else None,
            int(data.get("attempt", 0)),
            dict(data.get("details") or {}),
            data.get("dlq_max_attempts"),
        )


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

    @classmethod
    def server_jar(cls, home: Path, spark_jars: Sequence[Path]) -> ServerJar | None:
        """The code this sink runs in the Spark server's JVM (`capabilities.server_code`),
        built into `home` against the server's Spark jars; None when there is none to run here.
        A ServiceError says why it cannot be had (the sink then works without it)."""
        return None

    def session_key(self) -> str:
        """What a shared Spark session must not mix between drains (a catalog's settings)."""
        return ""

    def session_conf(self) -> dict[str, str]:
        """Runtime settings a Spark session must be made with to write this sink (a catalog's
        definition): set by spark_jobs.session when it makes the session, never by the sink,
        since runs of every drain share the session."""
        return {}

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
    def publish(self, conn: Connection, run_id: int, commit: SinkCommit | None) -> int:
        """Inside the Postgres commit transaction: the rows the run published."""

    @abc.abstractmethod
    def discard(self, conn: Connection, run_id: int) -> None:
        """An abandoned plan: drop what its attempts staged."""

    def commit_line(self, commit: SinkCommit) -> str:
        """The run's commit in words, for the run's log."""
        files = "" if commit.files is None else f", {commit.files} files"
        return (
            f"{commit.format} commit {self.capabilities.commit_id} {commit.id}{files} "
            f"({commit.bytes} bytes) added"
        )

    def upkeep_words(self) -> str | None:
        """What `drainer maintain` does to the sink, in words (a job's description); None:
        nothing but the drain's run history."""
        return None

    def upkeep(self, engine: Engine) -> UpkeepReport:
        """After every commit, bounded in time: keep the sink small (a failure is a warning)."""
        return UpkeepReport(self.location())

    def maintain(self, engine: Engine) -> UpkeepReport:
        """`drainer maintain`, under the drain's lease: the upkeep done to the end."""
        return UpkeepReport(self.location())


class CommitsFirst(Sink[ConfigT]):
    """A sink that commits before the Postgres commit, tagged with the run (a table format, a
    Kafka transaction): the Postgres transaction only records that commit."""

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

    def publish(self, conn: Connection, run_id: int, commit: SinkCommit | None) -> int:
        return 0 if commit is None else commit.rows

    def discard(self, conn: Connection, run_id: int) -> None:
        """Nothing staged in Postgres; the sink holds no commit of an unpublished attempt."""


class TableSink(CommitsFirst[ConfigT]):
    """A table format committed by Spark before the Postgres commit, tagged with the run."""

    def upkeep_words(self) -> str | None:
        # the retention `drainer maintain` keeps by default (spark_jobs.table_maintenance)
        return f"compacts {self.describe()} and removes files and snapshots older than 7 days"


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
    "CommitsFirst",
    "ServerJar",
    "Sink",
    "SinkCommit",
    "TableSink",
    "UpkeepReport",
    "is_uri",
    "local_folder",
    "warehouse_uri",
]
