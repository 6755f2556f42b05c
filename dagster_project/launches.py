"""Which levels a Dagster run drains, and under which launch key (drainer.store.launches).

Dagster's single-run backfill policy makes one run per contiguous range of the selected
partitions: a backfill of levels {0, 2} becomes a run for 0..0 and a run for 2..2. Each run of a
backfill therefore reads the backfill's whole target set from the instance and asks the drainer
for all of it under the key `dagster-backfill:<backfill id>`. The first run to get the drain
(runs of one drain are serialized by its pool and by drainer's lease) drains the levels together
with one budget; its siblings find that committed run by the key and report it. Each run then
materializes only its own partitions, with those levels' numbers from the shared run.

A run outside a backfill drains its own partitions under `dagster-run:<run id>`, so a retried
step reports the run it already committed instead of draining again.
"""

from __future__ import annotations

import dagster as dg

BACKFILL_TAG = "dagster/backfill"
# a parent in these states left work a retry must report or finish, not repeat
RETRIED = {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def launch_levels(context: dg.AssetExecutionContext) -> tuple[list[int], str]:
    """(levels to drain, launch key) for this run of the asset."""
    own = sorted(int(key) for key in context.partition_keys)
    backfill_id = context.run.tags.get(BACKFILL_TAG)
    if not backfill_id:
        return own, run_launch_key(context.instance, context.run)
    keys = backfill_partition_keys(context, backfill_id)
    if keys is None:  # the backfill is gone or its definition changed: drain what we were given
        context.log.warning(
            "backfill %s: its partition set could not be read; draining levels %s only",
            backfill_id,
            own,
        )
        return own, f"dagster-run:{context.run.run_id}"
    levels = sorted({int(key) for key in keys} | set(own))
    return levels, f"dagster-backfill:{backfill_id}"


def run_launch_key(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """The key of the first attempt in this run's chain of failed attempts (itself if none).

    Dagster drops a finished backfill's tags from a retry of one of its runs: a parent that ran
    in a backfill lends the backfill's key.
    """
    current = run
    while current.parent_run_id:
        parent = instance.get_run_by_id(current.parent_run_id)
        if parent is None or parent.status not in RETRIED:
            break
        if parent.tags.get(BACKFILL_TAG):
            return f"dagster-backfill:{parent.tags[BACKFILL_TAG]}"
        current = parent
    return f"dagster-run:{current.run_id}"


def backfill_partition_keys(
    context: dg.AssetExecutionContext, backfill_id: str
) -> list[str] | None:
    backfill = context.instance.get_backfill(backfill_id)
    if backfill is None:
        return None
    if not backfill.is_asset_backfill:  # a job backfill lists its partitions itself
        return list(backfill.partition_names or [])
    try:
        data = backfill.get_asset_backfill_data(context.repository_def.asset_graph)
        subset = data.get_target_partitions_subset(context.asset_key)
    except Exception as err:  # a definition change makes the stored subset unreadable
        context.log.warning("backfill %s: %s", backfill_id, err)
        return None
    return list(subset.get_partition_keys())
