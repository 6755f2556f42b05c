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

from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.settings import Settings, load_settings
from drainer.sinks import sink_for
from drainer.store import get_engine, runs
from drainer.store.leases import drain_lease
from drainer.store.runs import StoredRun


def abandon_plan(drain: DrainConfig, reason: str, settings: Settings | None = None) -> StoredRun:
    """End the drain's open plan; returns it as it was. Raises DrainBusy while a run holds it."""
    if not reason or not reason.strip():
        raise ConfigError(
            "--reason is required: say why the plan is abandoned, for the audit trail"
        )
    settings = settings or load_settings()
    engine = get_engine(settings.database_url)
    sink = sink_for(drain.sink, settings)
    with drain_lease(engine, drain.row()) as lease, engine.begin() as conn:
        run = runs.open_run(conn, drain.name)
        if run is None:
            raise ConfigError(
                f"drain '{drain.name}' has no open plan: nothing to abandon "
                f"(`drainer status {drain.name}` shows its runs)"
            )
        runs.abandon(conn, lease, run, getpass.getuser(), reason.strip())
        sink.discard(conn, run.id)
    return run
