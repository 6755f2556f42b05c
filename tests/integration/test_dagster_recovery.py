"""Dagster's recovery paths around a drain that committed (issue 20): checks that fail, retries
of a failed run, runs that find the drain busy, and the lag sensor's view of in-flight runs.

Each runs the code location's own definitions in-process on a real Kafka, Postgres and Spark.
"""

import threading
import time

import dagster as dg
import pytest
from sqlalchemy import text

from dagster_project.automation import RANGE_END, RANGE_START
from dagster_project.definitions import build_definitions
from drainer.kafka.producer import synthetic_records
from drainer.store.leases import drain_lease
from tests.support.stack import get_engine, produce_records


def _committed(drain) -> list:
    with get_engine().connect() as conn:
        return conn.execute(
            text(
                "SELECT r.id, r.launch_key, coalesce(sum(rl.drained), 0) AS drained FROM runs r "
                "LEFT JOIN run_levels rl ON rl.run_id = r.id "
                "WHERE r.drain = :d AND r.status = 'committed' GROUP BY r.id ORDER BY r.id"
            ),
            {"d": drain.name},
        ).all()


def _job():
    """The drain's job as the code location defines it (reconstructable for re-execution)."""
    import os

    from drainer.config import load_drains

    (name,) = load_drains(os.environ["DRAINER_CONFIG"])
    return build_definitions().resolve_job_def(f"{name}_job")


def test_a_check_that_raises_after_the_commit_fails_only_the_check(make_drain, spark, monkeypatch):
    import dagster_project.assets as assets

    drain = make_drain()
    produce_records(drain, synthetic_records(300), level=1)

    def offsets_never_backwards(_drain, _settings):
        raise RuntimeError("the checks' database connection went away")

    monkeypatch.setattr(assets, "CHECKS", (*assets.CHECKS[:2], offsets_never_backwards))
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(f"{drain.name}_job").execute_in_process(
            instance=instance, tags={RANGE_START: "0", RANGE_END: "2"}, raise_on_error=False
        )
        assert result.success  # the drain committed: the run says so
        assert len(result.asset_materializations_for_node(drain.name)) == 3
        evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
        failed = evaluations["offsets_never_backwards"]
        assert not failed.passed and "went away" in failed.description
        assert evaluations["dead_letters_not_growing"].passed
    assert [r.drained for r in _committed(drain)] == [300]


def test_reexecution_of_a_run_that_failed_after_commit_reports_that_run(
    make_drain, spark, monkeypatch
):
    import dagster_project.assets as assets

    drain = make_drain(budget=500)
    produce_records(drain, synthetic_records(2000), level=1)
    tags = {RANGE_START: "0", RANGE_END: "2"}
    real_run_tags = assets.run_tags

    def storage_lost(result):
        raise RuntimeError("Dagster's run storage went away")

    with dg.instance_for_test() as instance:
        monkeypatch.setattr(assets, "run_tags", storage_lost)  # fails after the commit
        first = dg.execute_job(dg.reconstructable(_job), instance=instance, tags=tags)
        assert not first.success
        assert [r.drained for r in _committed(drain)] == [500]
        monkeypatch.setattr(assets, "run_tags", real_run_tags)

        # re-execution from failure, as the UI launches it: the parent's tags carried over
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
        retry = dg.execute_job(
            dg.reconstructable(_job), instance=instance, tags=tags, reexecution_options=options
        )
        assert retry.success
        retry_run = instance.get_run_by_id(retry.run_id)
        assert retry_run.root_run_id == retry_run.parent_run_id == first.run_id
        # the retry reports the committed drainer run instead of draining a second budget
        committed = _committed(drain)
        assert [(r.drained, r.launch_key) for r in committed] == [
            (500, f"dagster-run:{first.run_id}")
        ]
        assert retry_run.tags["drainer/run_id"] == str(committed[0].id)
        materialized = retry.asset_materializations_for_node(drain.name)
        assert {m.metadata["run_shared"].value for m in materialized} == {True}

        # a fresh launch (not a retry) drains anew
        again = dg.execute_job(dg.reconstructable(_job), instance=instance, tags=tags)
        assert again.success
        assert [r.drained for r in _committed(drain)] == [500, 500]


def test_a_run_that_finds_the_drain_busy_waits_for_it(make_drain, spark):
    """A stock instance (no pool limit) starts a backfill's runs together: the later ones wait."""
    drain = make_drain()
    produce_records(drain, synthetic_records(300), level=0)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with drain_lease(get_engine(), drain.row()):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(30)
    threading.Timer(4.0, release.set).start()
    started = time.monotonic()
    try:
        defs = build_definitions()
        result = defs.resolve_job_def(f"{drain.name}_job").execute_in_process(
            instance=dg.DagsterInstance.ephemeral(),
            tags={RANGE_START: "0", RANGE_END: "0"},
            raise_on_error=False,
        )
    finally:
        release.set()
        holder.join()
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert time.monotonic() - started >= 3.5
    assert [r.drained for r in _committed(drain)] == [300]


@pytest.mark.parametrize("job_name", ["__ASSET_JOB", "team_job"])
def test_lag_sensor_sees_a_run_of_the_asset_launched_outside_its_job(make_drain, job_name):
    drain = make_drain(lag_threshold=100)
    produce_records(drain, synthetic_records(600), level=1)
    defs = build_definitions()
    sensor = defs.resolve_sensor_def(f"{drain.name}_lag_sensor")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources=defs.resources)
        assert len(sensor.evaluate_tick(context).run_requests) == 1
        # a run of the asset launched from the UI's Materialize (the implicit asset job) or
        # by a team's own job, started and not yet done
        team = dg.Definitions.merge(
            defs,
            dg.Definitions(jobs=[dg.define_asset_job("team_job", selection=[drain.name])]),
        )
        job = team.resolve_job_def(job_name)
        instance.create_run_for_job(
            job_def=job,
            status=dg.DagsterRunStatus.STARTED,
            asset_selection=frozenset({dg.AssetKey(drain.name)})
            if job_name == "__ASSET_JOB"
            else None,
        )
        skipped = sensor.evaluate_tick(context)
        assert not skipped.run_requests
        assert "in flight" in skipped.skip_message
