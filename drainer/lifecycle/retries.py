"""Dead letters `drainer dlq retry` handed back to their drain: a run of their own.

`dlq retry` only marks dead letters requested (drainer.lifecycle.dlq), so other drains of the
same topics never see them. When the drain plans next, the requested dead letters of the levels
it covers are claimed by a run of their own, in the transaction that stores it: a plan with no
ranges and no levels, so it moves no offset and no level's history (burst, throughput), and a
crash leaves it open like any plan, resumed with the same dead letters (the run is finished
first, as an open plan of other levels is). The executor reads the claimed records from
Postgres instead of Kafka, as they were read (a fixed value in place of the stored one), and
the sink writes them under the run's own proof; the commit marks each retried or dead again
(`drainer.store.retries.finish_retries`).
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.store import retries, runs
from drainer.store.leases import Lease
from drainer.store.runs import StoredRun

log = logging.getLogger(__name__)


def plan_retries(
    engine: Engine, lease: Lease, drain: DrainConfig, levels: list[int], trigger: str
) -> StoredRun | None:
    """Store a run that claims the requested dead letters of `levels`; None when none wait."""
    with engine.begin() as conn:
        if not retries.requested_retries(conn, drain.name, levels):
            return None
        run_id = runs.write_plan(
            conn, lease, drain.name, drain.budget, drain.mode, [], trigger, [], [], {}
        )
        claimed = retries.claim_requested(conn, drain.name, run_id, levels)
        stored = runs.get_run(conn, run_id)
    log.info(
        "planned run %d of drain %s: retrying dead letters %s",
        run_id,
        drain.name,
        ", ".join(str(i) for i in claimed),
    )
    return stored
