"""Every SQL statement of drainer, split by what it keeps.

| module          | keeps                                                              |
|-----------------|--------------------------------------------------------------------|
| `engine`        | the pooled engine per URL and the schema migrations (package data) |
| `leases`        | the drain row, its advisory lock and the fencing token             |
| `runs`          | plans, their ranges and per-level numbers, run status              |
| `offsets`       | committed offsets and offset maps per partition, the Kafka mirror, |
|                 | audited rewinds                                                    |
| `history`       | what each level drained in recent runs (burst decisions, health)   |
| `dead_letters`  | record failures, attempts, dead letters                            |
| `retries`       | dead letters `dlq retry` handed back: requested, claimed, finished |
| `sinks`         | the Postgres sink's target and staging tables                      |

Functions take an open connection and run inside the caller's transaction, so the run
lifecycle (`drainer.lifecycle.run`, `drainer.lifecycle.commit`) decides what commits together. No module outside
this package holds SQL text (a unit test checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drainer.store.engine import get_engine, migrate

__all__ = ["get_engine", "migrate"]


def __getattr__(name: str) -> Any:
    """`get_engine` and `migrate` on first use: importing a light module of the store
    (`sink_names`, `leases`' row) does not import SQLAlchemy's engine."""
    if name in __all__:
        from drainer.store import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'drainer.store' has no attribute {name!r}")
