"""Issue 19 item 4 on the real stack: each level's health, rates and ETA in `drainer status`
and on the Dagster asset (metadata and the `level_health` check).

Runs are spaced a few seconds apart so that the time `status` takes to start stays well under
STOP's "three usual intervals since the last run". That rule is a scheduled drain's: the drains
judged by it have a schedule (the tests call the runs themselves); a drain without one is judged
by its own `max_wait`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import dagster as dg

from drainer.kafka.producer import OutRecord, synthetic_records
from drainer.observe.drain_health import drain_health
from drainer.observe.health_rules import Health
from drainer.settings import load_settings
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import produce_records

GAP_S = 4.0
HOURLY = "0 * * * *"  # a schedule, so the runs' rhythm is what the level is judged by


def status_json(drain_name: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "status", drain_name, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_runs_that_keep_up_show_ok_with_an_eta(make_drain, spark):
    drain = make_drain(partitions=1, schedule=HOURLY)
    for n in range(3):
        produce_records(drain, synthetic_records(100, seed=n), level=1)
        assert drain_job.run(drain, trigger="test", settings=load_settings()).drained == 100
        time.sleep(GAP_S)
    produced_at = time.time()
    produce_records(drain, synthetic_records(40, seed=9), level=1)
    status = status_json(drain.name)
    waited = time.time() - produced_at

    by_level = {lv["level"]: lv["health"] for lv in status["levels"]}
    level1 = by_level[1]
    assert level1["state"] == "OK", level1
    # the last run drained all it found: the next run empties the level
    assert level1["eta_s"] is not None and level1["eta"] not in ("growing", "unknown")
    assert level1["drain_rate"] > 0 and level1["arrival_rate"] > 0
    assert 0 <= level1["oldest_age_s"] <= waited + 1  # the 40 records produced just now
    # levels with nothing waiting: OK and empty, no age
    for level in (0, 2):
        assert by_level[level]["state"] == "OK" and by_level[level]["eta"] == "empty"
        assert by_level[level]["oldest_age_s"] is None and by_level[level]["eta_s"] == 0

    text = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "status", drain.name],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert text.returncode == 0, text.stderr
    assert "health by level" in text.stdout and "draining" in text.stdout


def test_a_level_no_run_covers_is_stop_and_the_check_fails(make_drain, spark):
    """A backfill of levels 1..2 twice while level 0 waits: level 0 has never run (STOP)."""
    from dagster_project.definitions import RANGE_END, RANGE_START, build_definitions

    drain = make_drain(partitions=1, schedule=HOURLY)
    for level in range(3):
        produce_records(drain, synthetic_records(50, seed=level), level=level)
    before = time.time()
    drain_job.run(drain, levels=[1, 2], trigger="test", settings=load_settings())
    for level in (1, 2):
        produce_records(drain, synthetic_records(20, seed=level), level=level)
    time.sleep(GAP_S)

    defs = build_definitions()
    result = dg.materialize(
        [defs.get_assets_def(drain.name)],
        resources={"drainer": defs.resources["drainer"]},
        instance=dg.DagsterInstance.ephemeral(),
        tags={RANGE_START: "1", RANGE_END: "2"},
    )
    assert result.success  # a failed check does not fail the materialization
    check = {e.check_name: e for e in result.get_asset_check_evaluations()}["level_health"]
    assert not check.passed and check.severity is dg.AssetCheckSeverity.ERROR
    assert "level 0 STOP" in (check.description or "")
    assert check.metadata["level_0_health"].value == "STOP"
    assert check.metadata["level_2_health"].value == "OK"

    metadata = {
        m.partition: {key: value.value for key, value in m.metadata.items()}
        for m in result.asset_materializations_for_node(drain.name)
    }
    assert set(metadata) == {"1", "2"}
    for values in metadata.values():
        assert values["health"] == "OK" and values["eta"] == "empty" and values["eta_s"] == 0
        assert values["oldest_age_s"] is None  # nothing waits
        assert values["drain_rate"] > 0 and values["arrival_rate"] > 0  # the 20 more

    level0 = drain_health(drain, load_settings())[0]
    assert level0.state is Health.STOP and level0.backlog == 50
    assert level0.oldest_age_s is not None
    assert 0 <= level0.oldest_age_s <= time.time() - before + 30


def test_a_drain_run_by_hand_is_judged_by_its_max_wait_not_a_cadence(make_drain, spark):
    """Before: a drain run by hand showed every level STOP ("last run 77 s ago, more than 3
    times the usual 17 s"). Two runs GAP_S apart, then more than three such gaps of quiet:
    a scheduled drain would be STOP by now; this one is OK until a record outwaits max_wait."""
    drain = make_drain(partitions=1, max_wait="1h")
    for n in range(2):
        produce_records(drain, synthetic_records(10, seed=n), level=1)
        assert drain_job.run(drain, trigger="test", settings=load_settings()).drained == 10
        time.sleep(GAP_S)
    time.sleep(3 * GAP_S)
    produce_records(drain, synthetic_records(10, seed=7), level=1)
    level1 = {lv["level"]: lv["health"] for lv in status_json(drain.name)["levels"]}[1]
    assert level1["state"] == "OK", level1
    assert level1["eta"] == "at the next run (no schedule)", level1

    two_hours_ago = int((time.time() - 7200) * 1000)
    late = OutRecord(value=b"{}", key=b"late", timestamp_ms=two_hours_ago)
    produce_records(drain, [late], level=0)
    level0 = drain_health(drain, load_settings())[0]
    assert level0.state is Health.STOP and "past the level's max_wait" in level0.reason


def test_a_level_whose_offset_never_moves_stalls(make_drain, spark):
    """Every record of level 1 fails and is retried (not yet dead-lettered): runs commit, the
    level's committed offset stays put while its records wait."""
    drain = make_drain(
        partitions=1,
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=20,
    )
    produce_records(drain, [OutRecord(value=b"poison-%d" % i) for i in range(5)], level=1)
    produce_records(drain, synthetic_records(30), level=2)
    for _ in range(3):
        drain_job.run(drain, trigger="test", settings=load_settings())
        time.sleep(GAP_S)

    health = drain_health(drain, load_settings())
    assert health[1].state is Health.STALL, health[1]
    assert "has not moved in the last 3 runs" in health[1].reason
    assert health[1].backlog == 5 and health[1].drain_rate == 0
    assert health[1].eta_s is None and health[1].eta_text() == "unknown"
    assert health[2].state is Health.OK and health[2].eta_text() == "empty"

    level1 = next(lv for lv in status_json(drain.name)["levels"] if lv["level"] == 1)
    assert level1["health"]["state"] == "STALL" and level1["health"]["eta_s"] is None
