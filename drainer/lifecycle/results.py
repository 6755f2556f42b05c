"""What a run hands its executor and what it reports: `RunContext`, `RunResult`, `LevelReport`.

Kept apart from the run's steps (`drainer.lifecycle.run`) so that readers of results (the CLI,
Dagster metadata, Spark jobs) need not know how a run is carried out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.kafka.mirror import MirrorReport
from drainer.settings import Settings
from drainer.store import get_engine, launches, runs
from drainer.store.leases import Lease
from drainer.store.runs import StoredRange, StoredRun


@dataclass(frozen=True)
class RunContext:
    """What an executor needs to process one stored plan."""

    run: StoredRun
    drain: DrainConfig
    settings: Settings
    engine: Engine
    attempt: int
    lease: Lease | None = None  # staging writes check its fence: a zombie run cannot touch them
    # seconds the executor spent on named phases; it sets "spark_start" (session start-up)
    phases: dict[str, float] = field(default_factory=dict)
    # where each range's read starts: past what retention deleted (drainer.lifecycle.retention);
    # ranges missing here start at their planned start
    read_from: dict[tuple[str, int], int] = field(default_factory=dict)
    # key+value+header bytes read per (topic, partition), set by an executor that measures them
    read_bytes: dict[tuple[str, int], int] = field(default_factory=dict)
    # a lakehouse sink's table commit, set by the executor: format, location, version,
    # files_added, bytes_added, rows_added (spark_jobs.lakehouse.TableCommit)
    table_commit: dict[str, Any] = field(default_factory=dict)

    def readable_ranges(self) -> list[StoredRange]:
        """The run's ranges that still have offsets to read."""
        return [
            r
            for r in self.run.ranges
            if self.read_from.get((r.topic, r.partition), r.start) < r.end
        ]


Executor = Callable[[RunContext], Mapping[tuple[str, int], int] | None]
"""Processes a stored plan; returns how many records it read per (topic, partition).

Offsets are not records: transaction markers and aborted records (read_committed) leave gaps,
so the commit counts what was read. `None` means "every planned offset was a record".
"""


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
    return RunResult(
        run_id=run_id,
        drain=drain,
        levels=load_level_reports(run_id, engine),
        resumed=False,
        attempt=summary["attempts"],
        duration_s=summary["duration_s"] or 0.0,
        published_rows=0,
        phases=phases,
        shared=shared,
    )


def load_level_reports(run_id: int, engine: Engine | None = None) -> list[LevelReport]:
    """A run's per-level numbers as stored, highest level first."""
    engine = engine or get_engine()
    with engine.connect() as conn:
        return [LevelReport(**row) for row in runs.level_rows(conn, run_id)]
