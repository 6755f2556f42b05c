"""The soak's short version: consecutive runs with producers running and crashes injected at
chosen points; every record lands once and the sink's partitions stay folded. Per-run time is
not checked here (times do not belong in tests): benchmarks/soak.py runs a thousand and reports
the first and last runs' times."""

from __future__ import annotations

import pytest

from benchmarks.soak import soak
from drainer.sinks.postgres_folds import FANOUT

pytestmark = pytest.mark.slow


def test_a_short_soak_with_crashes_is_exactly_once_and_bounded(make_drain, spark):
    drain = make_drain(
        levels=2,
        partitions=2,
        budget=40,
        processor="spark_jobs.examples:one_row_per_record",
    )
    runs = FANOUT + 1  # every run commits one (a crashed one by the next run): a fold happens
    crashes = {2: "after_staging", FANOUT - 2: "after_commit"}
    report = soak(drain, runs, crashes, produce_per_s=10.0)
    assert report["crashed"] == 2
    assert report["records"] > 0
    # runs - crashes partitions attached (plus the ones the final drain added), folded by tier
    assert 0 < report["partitions_final"] < FANOUT
    assert report["partitions_most"] < FANOUT
    # a run per loop iteration, but the one that crashed before its commit is resumed by the next
    # under its own id; the final drain may add one: no run row is lost or pruned
    assert report["state_rows"]["runs"] >= runs - 1
