"""A run's budgets from the drain's record: records from its throughput (`run_seconds`), bytes
from its record sizes (`budget_bytes`).

The I/O half of `drainer.allocation.timebox` and `drainer.allocation.bytes`: recent committed
runs' records, bytes and wall time come from Postgres (`drainer.store.throughput`); record sizes
of partitions no measured run has read come from a sample read from Kafka, once per plan. A
drain that sets neither key gets its configured `budget` and no byte rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from drainer.allocation import PartitionBacklog, minimum_budget
from drainer.allocation.timebox import (
    THROUGHPUT_HISTORY,
    THROUGHPUT_WINDOW,
    RunThroughput,
    TimeBox,
    timeboxed_budget,
)
from drainer.config import DrainConfig
from drainer.kafka.session import KafkaSession
from drainer.store import throughput

SAMPLE_RECORDS = 20
"""Records read per partition to estimate a record size no run has measured yet."""


@dataclass(frozen=True)
class RunBudget:
    """What the next run may read: `budget` records and, with `budget_bytes`, that many bytes."""

    budget: int
    cap: int  # the configured `budget`
    timebox: TimeBox | None = None  # with `run_seconds`: the throughput the budget came from
    budget_bytes: int | None = None  # the byte budget in force (the slot's bytes may lower it)
    record_bytes: dict[tuple[int, int], float] = field(default_factory=dict)
    sampled: tuple[tuple[int, int], ...] = ()  # (level, partition) sized from a Kafka sample

    def summary(self) -> str | None:
        """One line for `drainer plan` and `drainer status`; None when neither key is set."""
        if self.timebox is None and self.budget_bytes is None:
            return None
        parts = []
        box = self.timebox
        if box is not None:
            rate = "" if box.records_per_s is None else f"{box.records_per_s:,.0f} records/s, "
            if box.bytes_per_s is not None:
                rate += f"{box.bytes_per_s:,.0f} bytes/s, "
            parts.append(
                f"run_seconds: budget {self.budget:,} of {self.cap:,} ({rate}{box.reason})"
            )
        if self.budget_bytes is not None:
            sampled = f", {len(self.sampled)} sampled from Kafka" if self.sampled else ""
            parts.append(
                f"budget_bytes: {self.budget_bytes:,} bytes; record sizes of "
                f"{len(self.record_bytes)} partitions known{sampled}"
            )
        return "; ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """For `drainer plan --json` and `drainer status --json`."""
        box = self.timebox
        return {
            "budget": self.budget,
            "cap": self.cap,
            "summary": self.summary(),
            "run_seconds_throughput": None
            if box is None
            else {
                "records_per_s": box.records_per_s,
                "bytes_per_s": box.bytes_per_s,
                "byte_budget": box.byte_budget,
                "reason": box.reason,
            },
            "budget_bytes": self.budget_bytes,
            "record_bytes": [
                {"level": level, "partition": part, "avg_bytes": round(size, 1)}
                for (level, part), size in sorted(self.record_bytes.items())
            ],
            "sampled": [list(key) for key in self.sampled],
        }


def time_box(engine: Engine, drain: DrainConfig, levels: list[int]) -> TimeBox | None:
    """With `run_seconds`: the record budget the drain's recent throughput fits in the slot."""
    if drain.run_seconds is None:
        return None
    with engine.connect() as conn:
        recent = [
            RunThroughput(*run)
            for run in throughput.recent_throughput(conn, drain.name, THROUGHPUT_HISTORY)
        ]
    floor = minimum_budget(levels, drain.distributor)
    return timeboxed_budget(drain.run_seconds, drain.budget, recent, max(1, floor))


def run_budget(
    engine: Engine,
    drain: DrainConfig,
    levels: list[int],
    backlogs: list[PartitionBacklog],
    kafka: KafkaSession | None = None,
) -> RunBudget:
    """The next run's budgets; without `kafka`, record sizes come from history only."""
    box = time_box(engine, drain, levels)
    budget = drain.budget if box is None else box.budget
    if drain.budget_bytes is None:
        return RunBudget(budget, drain.budget, box)
    sizes = _recorded_sizes(engine, drain, levels)
    waiting = {
        (b.level, b.partition): b.first_pending
        for b in backlogs
        if b.backlog and (b.level, b.partition) not in sizes
    }
    sampled = kafka.sample_record_sizes(waiting, SAMPLE_RECORDS) if kafka else {}
    limit = drain.budget_bytes
    if box is not None and box.byte_budget is not None:
        limit = max(1, min(limit, box.byte_budget))  # what the slot holds at the byte rate
    sizes.update(sampled)
    return RunBudget(budget, drain.budget, box, limit, sizes, tuple(sorted(sampled)))


def _recorded_sizes(
    engine: Engine, drain: DrainConfig, levels: list[int]
) -> dict[tuple[int, int], float]:
    """Average record sizes of the covered levels' partitions, as recent runs measured them."""
    topics = {drain.level_topic(level): level for level in levels}
    with engine.connect() as conn:
        found = throughput.record_sizes(conn, drain.name, sorted(topics), THROUGHPUT_WINDOW)
    return {(topics[topic], part): size for (topic, part), size in found.items()}
