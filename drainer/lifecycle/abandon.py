"""`drainer plan abandon`: end an open plan that cannot succeed, committing nothing, audited.

An uncommitted plan is resumed, never replaced (docs/design.md), which is what makes a crash
harmless; a plan that fails every time (a processor bug on one record, a topic recreated under
it) would then block its drain forever. Abandoning it under the drain's lease marks it
`abandoned`, drops its stage table (what its attempts staged), and records who, when, why and
its ranges in `plan_abandons`. Offsets do not move, so the next run plans afresh from the
committed offsets: fix the cause first, or the new plan meets the same records.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine

from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.settings import Settings
from drainer.sinks import Sink, SinkCommit, sink_for
from drainer.store import get_engine, runs
from drainer.store.leases import drain_lease
from drainer.store.runs import StoredRun

CommitFinder = Callable[[DrainConfig, StoredRun, Settings, Engine], SinkCommit | None]
"""Stops an open plan's attempts on Spark, then finds its commit in the table (injected from
spark_jobs: this package imports no pyspark)."""


def abandon_plan(
    drain: DrainConfig,
    reason: str,
    settings: Settings,
    finder: CommitFinder | None = None,
) -> StoredRun:
    """End the drain's open plan; returns it as it was. Raises DrainBusy while a run holds it.

    A plan whose sink commits before Postgres may already be in its table: an attempt that
    crashed after its table commit, or a write the Connect server finished for a dead client.
    Abandoning it would let the next plan write those rows again, so abandon first asks: the
    proof on record in Postgres, then (with `finder`, after stopping the plan's Spark
    operations) the table itself; a landed commit refuses the abandon with what to do.
    """
    if not reason or not reason.strip():
        raise ConfigError(
            "--reason is required: say why the plan is abandoned, for the audit trail"
        )
    engine = get_engine(settings.database_url)
    sink = sink_for(drain.sink, settings, drain.name)
    with drain_lease(engine, drain.row()) as lease, engine.begin() as conn:
        run = runs.open_run(conn, drain.name)
        if run is None:
            raise ConfigError(
                f"drain '{drain.name}' has no open plan: nothing to abandon "
                f"(`drainer status {drain.name}` shows its runs)"
            )
        if sink.capabilities.commit == "before_postgres":
            _refuse_if_committed(drain, run, sink, settings, engine, conn, finder)
        runs.abandon(conn, lease, run, getpass.getuser(), reason.strip())
        sink.discard(conn, run.id)
    return run


def _refuse_if_committed(
    drain: DrainConfig,
    run: StoredRun,
    sink: Sink[Any],
    settings: Settings,
    engine: Engine,
    conn: Connection,
    finder: CommitFinder | None,
) -> None:
    proof = runs.table_proof(conn, run.id)
    landed = SinkCommit.from_dict(proof[1], sink.capabilities.files) if proof else None
    if landed is None and finder is not None:
        landed = finder(drain, run, settings, engine)
    if landed is None:
        return
    raise ConfigError(
        f"run {run.id} of drain '{drain.name}' already committed to {sink.describe()} "
        f"({sink.capabilities.commit_id} {landed.id}): abandoning it would let the next "
        f"plan write those rows again. Run `drainer run {drain.name}` instead: it finds the "
        "commit and commits the offsets, writing nothing twice. Nothing was abandoned"
    )
