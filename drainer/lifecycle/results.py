"""What a run hands its executor and what it reports: `RunContext`, `RunResult`, `LevelReport`.

Kept apart from the run's steps (`drainer.lifecycle.run`) so that readers of results (the CLI,
Dagster metadata, Spark jobs) need not know how a run is carried out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.lifecycle.mirror import MirrorReport
from drainer.settings import Settings
from drainer.sinks import Sink, SinkCommit, sink_for
from drainer.store import launches, route_tables, runs, upserts
from drainer.store.leases import Lease
from drainer.store.runs import StoredRange, StoredRun


@dataclass(frozen=True)
class RunContext:
    """What an executor needs to process one stored plan (read only: results come back as an
    ExecutionResult)."""

    run: StoredRun
    drain: DrainConfig
    settings: Settings
    engine: Engine
    attempt: int
    lease: Lease | None = None  # staging writes check its fence: a zombie run cannot touch them
    # where each range's read starts: past what retention deleted (drainer.lifecycle.retention_gaps);
    # ranges missing here start at their planned start
    read_from: Mapping[tuple[str, int], int] = field(default_factory=dict)

    @cached_property
    def sink(self) -> Sink[Any]:
        """The drain's sink (drainer.sinks), for the driver's steps."""
        return sink_for(self.drain.sink, self.settings, self.drain.name)

    def readable_ranges(self) -> list[StoredRange]:
        """The run's ranges that still have offsets to read."""
        return [
            r
            for r in self.run.ranges
            if self.read_from.get((r.topic, r.partition), r.start) < r.end
        ]

    def readable_records(self) -> dict[tuple[str, int], int]:
        """The most records the run's read returns per (topic, partition): its offsets from
        where it starts (`read_from`), less those the offset map has done. A read returns at
        most one record per offset, so a read whose total is the sum of these read exactly
        these many from each partition (`spark_jobs.kafka_source.counted`)."""
        most: dict[tuple[str, int], int] = {}
        for r in self.run.ranges:
            key = (r.topic, r.partition)
            most[key] = most.get(key, 0) + r.readable_from(self.read_from.get(key, r.start))
        return most


@dataclass(frozen=True)
class ExecutionResult:
    """What an executor hands back to the commit.

    `read`: records read per (topic, partition); offsets are not records (transaction markers
    and aborted records under read_committed leave gaps), so the commit counts what was read.
    None means "every planned offset was a record". `read_bytes`: key+value+header bytes read
    per (topic, partition), None when not measured. `table_commit`: the commit a sink that
    commits before Postgres made for the run (or an earlier attempt made, found again).
    """

    read: Mapping[tuple[str, int], int] | None = None
    read_bytes: Mapping[tuple[str, int], int] | None = None
    spark_start_s: float = 0.0
    table_commit: SinkCommit | None = None
    # whose staged failures the commit takes: the attempt whose write landed (None: all)
    failures_attempt: int | None = None
    # seconds of the sink's own steps inside the Spark job (`SparkSink.steps`): the run's
    # phases show them as `sink.<step>`, parts of `spark_job`, not added to it
    sink_steps: Mapping[str, float] | None = None


Executor = Callable[[RunContext], ExecutionResult]
"""Processes a stored plan (read, process, write the sink) and says what it read and wrote."""


@dataclass
class LevelReport:
    level: int
    reserved: int
    burst: int
    allocated: int
    backlog_before: int
    planned: int
    drained: int
    failed: int
    dead_lettered: int
    fill_ratio: float
    backlog_after: int
    lost_to_retention: int = 0  # offsets Kafka deleted before this run could drain them
    # key+value+header bytes the level's records took (None when the run did not measure them:
    # `measure_bytes`)
    read_bytes: int | None = None


@dataclass
class RunResult:
    run_id: int
    drain: str
    levels: list[LevelReport]
    resumed: bool
    attempt: int
    duration_s: float
    published_rows: int
    mirror: MirrorReport = field(default_factory=MirrorReport)
    # seconds per phase: plan, spark_start, spark_job, commit, mirror, upkeep
    phases: dict[str, float] = field(default_factory=dict)
    # an open plan for other levels that this call finished before planning its own levels
    finished: RunResult | None = None
    # True when an earlier launch with the same launch key drained this run; nothing new drained
    shared: bool = False
    # what failed after the commit (mirror, dead-letter publish, backlog lookup): the run's
    # results are committed all the same, and the next run retries these steps
    warnings: list[str] = field(default_factory=list)
    # a lakehouse sink's table commit of this run (format, location, version, files and bytes
    # added); empty for a Postgres sink
    table_commit: dict[str, Any] = field(default_factory=dict)
    # the columns this run added to its sink table (audited with the run)
    columns_added: list[str] = field(default_factory=list)
    # a state table (`write: upsert`): what the run's merge did (rows_inserted, rows_updated,
    # rows_deleted, rows_skipped_older); empty for an append
    upsert: dict[str, int] = field(default_factory=dict)
    # a routed sink (one topic, many tables): the rows the run wrote into each table
    table_rows: dict[str, int] = field(default_factory=dict)
    # a run of dead letters `dlq retry` handed back: how many were retried and how many failed
    # again (dead letters again, with their new error); 0 for an ordinary run
    retried: int = 0
    dead_again: int = 0

    @property
    def drained(self) -> int:
        return sum(level.drained for level in self.levels)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["drained"] = self.drained
        return data


def committed_result(engine: Engine, drain: str, run_id: int, shared: bool = False) -> RunResult:
    """A committed run as stored, e.g. for the launches that share it."""
    with engine.connect() as conn:
        summary = launches.run_summary(conn, run_id)
        phases = launches.load_phases(conn, run_id)
        added = runs.columns_added(conn, run_id)
        counts = upserts.stored_counts(conn, run_id)
        per_table = route_tables.runs_rows(conn, [run_id]).get(run_id, {})
    return RunResult(
        run_id=run_id,
        drain=drain,
        levels=load_level_reports(run_id, engine),
        resumed=False,
        attempt=summary["attempts"],
        duration_s=summary["duration_s"] or 0.0,
        published_rows=summary["published_rows"] or 0,  # null: committed before migration 021
        phases=phases,
        shared=shared,
        columns_added=added,
        upsert=counts,
        table_rows=per_table,
    )


def load_level_reports(run_id: int, engine: Engine) -> list[LevelReport]:
    """A run's per-level numbers as stored, highest level first."""
    with engine.connect() as conn:
        return [LevelReport(**row) for row in runs.level_rows(conn, run_id)]
