"""Health checks of a drain , shared by the Dagster asset checks and `status`.

Each returns (passed, description, numbers) so any orchestrator can wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.planning import partition_states
from drainer.settings import Settings
from drainer.store import dead_letters, get_engine, offsets, runs


def _engine(settings: Settings) -> Engine:
    return get_engine(settings.database_url)


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    description: str
    numbers: dict[str, int | float] = field(default_factory=dict)


def total_backlog(drain: DrainConfig, settings: Settings) -> dict[int, int]:
    """Backlog per level, from Kafka end offsets and Postgres progress."""
    by_level = {level: 0 for level in range(drain.levels)}
    with KafkaSession(drain, settings) as kafka:
        parts = partition_states(_engine(settings), drain, list(range(drain.levels)), kafka)
    for p in parts:
        by_level[p.level] += p.backlog
    return by_level


def lag_within_sla(drain: DrainConfig, settings: Settings) -> CheckResult:
    """Passes while the total backlog is at most `lag_sla` records (default 10 budgets)."""
    sla = drain.lag_sla if drain.lag_sla is not None else 10 * drain.budget
    by_level = total_backlog(drain, settings)
    total = sum(by_level.values())
    numbers: dict[str, int | float] = {"backlog": total, "sla": sla}
    numbers.update({f"level_{lvl}_backlog": n for lvl, n in by_level.items()})
    return CheckResult(total <= sla, f"backlog {total:,} records (SLA {sla:,})", numbers)


def dead_letters_not_growing(drain: DrainConfig, settings: Settings) -> CheckResult:
    """Passes when the latest committed run dead-lettered nothing."""
    with _engine(settings).connect() as conn:
        new = runs.latest_committed_dead_lettered(conn, drain.name)
        pending = dead_letters.pending_dead_letters(conn, drain.name)
    return CheckResult(
        new == 0,
        f"latest run dead-lettered {new:,} records; {pending:,} dead letters not retried",
        {"new_dead_letters": new, "dead_letters_pending": pending},
    )


def offsets_never_backwards(drain: DrainConfig, settings: Settings) -> CheckResult:
    """Each partition's committed offset at plan time never decreases from run to run.

    Rewinds are deliberate and audited (`drainer rewind`), so runs before a partition's latest
    rewind are not compared with runs after it.
    """
    with _engine(settings).connect() as conn:
        regressions = offsets.unexplained_regressions(conn, drain.name)
    if not regressions:
        return CheckResult(True, "committed offsets only moved forward", {"regressions": 0})
    first = regressions[0]
    return CheckResult(
        False,
        f"{len(regressions)} partition(s) moved backwards without a rewind, e.g. "
        f"{first.topic}[{first.partition}] from {first.prev} to {first.start_offset} at run {first.id}",
        {"regressions": len(regressions)},
    )
