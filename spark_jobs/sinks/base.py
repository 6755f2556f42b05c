"""The Spark half of the sink interface: write a run's output, find a run's sink commit,
maintain a table. Each sink's class extends its driver-side class (drainer.sinks) with these.

Roles, as in a distributed commit: the Spark tasks write and send back only counts; the
driver commits. A sink that commits before Postgres (`capabilities.commit == "before_postgres"`)
tags its commit with the run, and `committed` (required of every sink) finds that commit
again, so a resumed run never writes twice. A sink never changes the Spark session runs share:
what a write needs goes with the write, or is set when the session is made.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructType,
)

from drainer.errors import ConfigError, DrainerError, ServiceError
from drainer.lifecycle.results import RunContext
from drainer.sinks import Sink, SinkCommit
from drainer.sinks.upsert import UpsertSpec, upsert_spec
from drainer.store import runs
from drainer.store.leases import check_fence

RUN_PROPERTY = "drainer.run-id"
DRAIN_PROPERTY = "drainer.drain"
NONCE_PROPERTY = "drainer.run-nonce"  # the run's identity that a restored database never reissues
ATTEMPT_PROPERTY = "drainer.attempt"  # whose staged failures the commit takes
# an output column of the first type fits a table column of the second: cast, not an error
_WIDENINGS: set[tuple[type[DataType], type[DataType]]] = {
    (ByteType, ShortType),
    (ByteType, IntegerType),
    (ShortType, IntegerType),
    (ByteType, LongType),
    (ShortType, LongType),
    (IntegerType, LongType),
    (FloatType, DoubleType),
}


def no_signal() -> None:
    """A `landed` callback for a write no one waits on (`SparkSink.write_signalled`)."""


class SparkSink(Sink[Any]):
    """A sink that Spark can write: the driver side plus the Spark steps of a run."""

    def steps(self) -> dict[str, float]:
        """Seconds of the steps of the sink's last write that it times (its commit's parts),
        for the run's phases; none by default."""
        return {}

    def state_spec(self, ctx: RunContext) -> UpsertSpec | None:
        """The run's upsert settings (None: an append), with the metadata columns its rows
        carry but its table does not keep, which the collapse drops after breaking ties."""
        return upsert_spec(self.config, ctx.drain.unwritten_metadata())

    def prepare(self, spark: SparkSession, drain: str) -> None:  # noqa: B027  (Postgres: nothing)
        """Check that the session can write this sink (jars, extension), define its catalog."""

    @abc.abstractmethod
    def committed(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        """The run's commit if the sink already holds it: what a resumed run asks a sink that
        commits before Postgres, so it never writes twice. Required of every sink, so one that
        commits first cannot forget it; a sink that commits in Postgres holds none (None)."""

    def committed_anywhere(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        """The run's commit if the sink holds any part of it (`plan abandon` must refuse such
        a plan): `committed`, but a routed sink's tables each answer for themselves."""
        return self.committed(spark, ctx)

    @abc.abstractmethod
    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> SinkCommit | None:
        """Write the run's output once; a table sink returns the commit it made. Columns it
        adds to an existing table go on record first (`note_columns_added`)."""

    def write_signalled(
        self, spark: SparkSession, ctx: RunContext, out: DataFrame, landed: Callable[[], None]
    ) -> SinkCommit | None:
        """`write`, calling `landed` once the table holds the run's commit, before the sink
        reads its proof back: a routed run starts its other tables' writes then
        (spark_jobs.sinks.routed). By default, when `write` returns."""
        done = self.write(spark, ctx, out)
        landed()
        return done

    # True: `flag` keeps the run's decoded records (persisted) and the run decodes them once
    # for the bad records' staging and the write alike, so its aggregate, the staging and the
    # write read Kafka once (a routed sink); `release` lets them go
    keeps_decoded = False

    def flag(self, spark: SparkSession, ctx: RunContext, decoded: DataFrame) -> DataFrame:
        """The run's decoded records with those this sink cannot take marked bad (their reason
        in the `ERROR` column), before a processor sees them: a routed sink's rows whose route
        names no table (spark_jobs.sinks.routed); unchanged by every other sink."""
        return decoded

    def release(self, ctx: RunContext) -> None:  # noqa: B027  (nothing kept by default)
        """Let go of what the sink kept for the run's attempt (`keeps_decoded`)."""

    def write_records(
        self, spark: SparkSession, ctx: RunContext, df: DataFrame, output_schema: StructType
    ) -> SinkCommit | None:
        """Record mode: the handler's rows (failures staged by the tasks), written once."""
        from spark_jobs.modes import record_mode_rows

        return self.write(spark, ctx, record_mode_rows(ctx, df, output_schema))

    def maintain_table(
        self, spark: SparkSession, retention_hours: float, force: bool
    ) -> dict[str, Any]:
        """Compact the table and expire what is older than the retention (`drainer maintain`)."""
        raise ConfigError(
            f"{self.describe()} has no table maintenance: `drainer maintain` folds and prunes it"
        )

    def known_failure(self, err: BaseException, drain: str) -> DrainerError | None:
        """A Spark error that says this sink's service is gone, as one line; else None."""
        return None

    def crash_while_writing(self, ctx: RunContext) -> None:
        """Fault injection: end the process once the Spark job writes its results."""


def note_columns_added(ctx: RunContext, columns: list[str]) -> None:
    """The columns a write is about to add to the sink table, on the run's record (fenced)
    before the table changes: a commit that lands and a process that dies before telling
    Postgres must not lose the audit (a retried write adds the same ones)."""
    if not columns:
        return
    with ctx.engine.begin() as conn:
        check_fence(conn, ctx.lease, shared=True)
        runs.note_columns_added(conn, ctx.run.id, columns)


def marker(drain: str, run_id: int, nonce: str | None = None, attempt: int = 0) -> str:
    """The run's identity as the table commit carries it (a run planned before nonces: drain
    and run id only, as its commits were written)."""
    data: dict[str, Any] = {DRAIN_PROPERTY: drain, RUN_PROPERTY: run_id}
    if nonce is not None:
        data |= {NONCE_PROPERTY: nonce, ATTEMPT_PROPERTY: attempt}
    return json.dumps(data, separators=(",", ":"))


def run_of(ctx: RunContext) -> tuple[str, int, str | None, int]:
    """(drain, run id, nonce, attempt): what a table commit's marker names."""
    return ctx.drain.name, ctx.run.id, ctx.run.nonce, ctx.attempt


def missing_table(err: Exception) -> bool:
    text = str(err)
    return any(
        sign in text
        for sign in (
            "DELTA_MISSING_DELTA_TABLE",
            "DELTA_TABLE_NOT_FOUND",
            "is not a Delta table",
            "TABLE_OR_VIEW_NOT_FOUND",
            "PATH_NOT_FOUND",
            "NoSuchTableException",
        )
    )


def check_extension(spark: SparkSession, sink: Sink[Any], drain: str) -> None:
    """The session has the sink's SQL extension (its jars): else what to do, in one line."""
    wanted = sink.capabilities.spark_extension
    loaded = spark.conf.get("spark.sql.extensions", "") or ""
    if wanted and wanted not in loaded:
        raise ServiceError(
            f"drain '{drain}' writes a {sink.type} table, but this Spark was started without "
            f"the {sink.type} jars and SQL extension: run `drainer services up` (it restarts "
            "the local Connect server with the jars the drains file needs), or start your "
            "server with the jars and settings in docs/lakehouse.md"
        )


def fit_schema(out: DataFrame, table: StructType | None, where: str) -> DataFrame:
    """The output shaped for the table: widened where safe, missing columns as nulls.

    A column whose type cannot be stored in the table's column is a ConfigError naming it,
    raised before anything is written; new columns pass through (schema evolution).
    """
    if table is None:
        return out
    have = {f.name: f for f in out.schema.fields}
    selected = []
    for field in table.fields:
        mine = have.get(field.name)
        if mine is None:
            selected.append(F.lit(None).cast(field.dataType).alias(field.name))
            continue
        if mine.dataType != field.dataType:
            if (type(mine.dataType), type(field.dataType)) not in _WIDENINGS:
                raise ConfigError(
                    f"output column {field.name} is {mine.dataType.simpleString()}, but the "
                    f"table {where} stores it as {field.dataType.simpleString()}: cast it in "
                    "the processor (or handler's output_schema) to the table's type, or write "
                    "to a new table. Nothing was committed"
                )
            selected.append(F.col(f"`{field.name}`").cast(field.dataType).alias(field.name))
            continue
        selected.append(F.col(f"`{field.name}`"))
    known = set(table.fieldNames())
    selected += [F.col(f"`{f.name}`") for f in out.schema.fields if f.name not in known]
    return out.select(*selected)
