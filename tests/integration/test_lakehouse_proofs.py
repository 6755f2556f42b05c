"""The proof that a run already committed to its table survives what could erase it (issue 26):
drainer's own maintenance, Delta's log clean-up, an abandon, a racing attempt, a state database
restored to an earlier point. Each test crashes a run after its table commit (the window where
the table holds the run and Postgres does not) and proves every offset lands exactly once.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from lifecycle_helpers import cli
from offsets import high_watermarks
from sqlalchemy import text
from test_exactly_once import drain_until_empty, produce_backlog, runs_of
from test_lakehouse import (
    BUDGET,
    DATAFRAME_MODE,
    PER_PARTITION,
    assert_each_record_once,
    sink_of,
    table_offsets,
    table_run_ids,
)

from drainer import faults
from drainer.settings import load_settings
from drainer.sinks.delta_log import latest_commits
from spark_jobs import drain_job
from spark_jobs.sinks.delta import RECENT_COMMITS
from tests.support.stack import get_engine


def _crash_after_table_commit(drain) -> int:
    crashed = cli("run", drain.name, fault="after_table_commit")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    run = runs_of(drain)[-1]
    assert run.status == "running" and run.id in table_run_ids(drain)
    return run.id


def _forget_postgres_proof(run_id: int) -> None:
    """As if the crash came before the proof was on record: only the table knows."""
    with get_engine().begin() as conn:  # (an older drainer has no such record to forget)
        if conn.scalar(text("SELECT to_regclass('run_table_proofs')")) is not None:
            conn.execute(text("DELETE FROM run_table_proofs WHERE run_id = :r"), {"r": run_id})


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_maintain_with_zero_retention_keeps_an_open_plans_commit_so_the_resume_writes_once(
    make_drain, lakehouse, fmt
):
    """Before: `drainer maintain --retention-hours 0 --force` rewrote Iceberg's files and
    expired the run's snapshot; the resumed run found no commit and wrote the run again.
    Now maintenance keeps what an open plan committed, and the proof is in Postgres too."""
    drain = make_drain(sink=sink_of(fmt), budget=200, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    for _ in range(2):  # committed runs: small files and snapshots for maintenance to take
        assert cli("run", drain.name).returncode == 0
    run_id = _crash_after_table_commit(drain)
    _forget_postgres_proof(run_id)  # the table's own history must still hold the proof
    done = cli("maintain", drain.name, "--retention-hours", "0", "--force", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{") :])
    assert report["table"]["open_plan_kept_hours"] is not None  # it saw the open plan
    drain_until_empty(drain)
    assert table_run_ids(drain).count(run_id) == 1
    assert_each_record_once(drain, total)


def test_delta_log_clean_up_loses_the_runs_history_but_not_its_proof(make_drain, lakehouse):
    """Delta's log clean-up removes the run's entry from DESCRIBE HISTORY. Before: the resumed
    run found no commit, Delta skipped its write by txnVersion and the run failed with
    'database reset?' (advising abandon, which then wrote it twice). Now the proof is on
    record in Postgres the moment the table commit is seen."""
    from deltalake import DeltaTable

    drain = make_drain(sink=sink_of("delta"), budget=BUDGET, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    run_id = _crash_after_table_commit(drain)
    folder = Path(load_settings().warehouse) / drain.sink.path
    # what log clean-up leaves: the run's commit no longer in the history (its JSON gone,
    # replaced by a checkpoint); here the entry is rewritten without its marker
    log = folder / "_delta_log"
    for entry in sorted(log.glob("*.json")):
        lines = entry.read_text().splitlines()
        kept = [ln for ln in lines if "userMetadata" not in ln or str(run_id) not in ln]
        stripped = []
        for line in kept:
            action = json.loads(line)
            action.get("commitInfo", {}).pop("userMetadata", None)
            stripped.append(json.dumps(action))
        entry.write_text("\n".join(stripped) + "\n")
        (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum
    history = DeltaTable(str(folder)).history()
    assert not any(str(run_id) in (h.get("userMetadata") or "") for h in history)
    drain_until_empty(drain)
    assert_each_record_once(drain, total)


def test_delta_without_history_or_record_stops_in_one_line_and_writes_nothing_twice(
    make_drain, lakehouse
):
    """The proof truly gone from history and Postgres: Delta's transaction for this run (its
    own app id) still skips the write; the run stops naming what to check."""
    drain = make_drain(sink=sink_of("delta"), budget=BUDGET, **DATAFRAME_MODE)
    produce_backlog(drain, PER_PARTITION)
    run_id = _crash_after_table_commit(drain)
    _forget_postgres_proof(run_id)
    log = Path(load_settings().warehouse) / drain.sink.path / "_delta_log"
    for entry in sorted(log.glob("*.json")):
        actions = [json.loads(ln) for ln in entry.read_text().splitlines()]
        for action in actions:
            action.get("commitInfo", {}).pop("userMetadata", None)
        entry.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum
    proc = cli("run", drain.name)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "already records this run's transaction" in proc.stderr
    assert table_run_ids(drain) == []  # markers stripped above; and no second commit:
    from deltalake import DeltaTable

    rows = DeltaTable(str(log.parent)).to_pyarrow_table().num_rows
    assert rows == BUDGET


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_abandon_after_the_table_commit_is_refused_and_the_run_completes_once(
    make_drain, lakehouse, fmt
):
    """Before: `drainer plan abandon` printed 'nothing was committed'; the next plan wrote the
    run's rows again (1,000 rows for 500 offsets)."""
    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    run_id = _crash_after_table_commit(drain)
    _forget_postgres_proof(run_id)  # abandon must ask the table itself
    refused = cli("plan", "abandon", drain.name, "--reason", "looks stuck")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "already committed" in refused.stderr and f"drainer run {drain.name}" in refused.stderr
    assert runs_of(drain)[-1].status == "running"  # not abandoned
    drain_until_empty(drain)
    assert_each_record_once(drain, total)


@pytest.mark.serial  # it rewinds runs_id_seq, which every drain's runs take their ids from
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_restored_state_database_never_takes_an_old_commit_for_a_new_run(
    make_drain, lakehouse, fmt
):
    """Point-in-time restore to before a committed run: runs_id_seq reissues its id, and the
    new run plans other ranges (here a bigger budget). Before: the new run matched the old
    commit by (drain, run id), was taken as committed, and the records it planned beyond the
    old run's were lost. The run nonce tells the two runs apart."""
    drain = make_drain(sink=sink_of(fmt), budget=200, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    assert cli("run", drain.name).returncode == 0
    (first,) = runs_of(drain)
    old = table_offsets(drain)
    bigger = drain.model_copy(update={"budget": 300})
    engine = get_engine()
    try:
        with engine.begin() as conn:  # the restore: the run and its progress never happened
            conn.execute(text("DELETE FROM runs WHERE id = :r"), {"r": first.id})
            conn.execute(text("DELETE FROM partition_offsets WHERE drain = :d"), {"d": drain.name})
            # the sequence as the restore left it: the next run gets the old run's id
            conn.execute(text("SELECT setval('runs_id_seq', :r - 1)"), {"r": first.id})
        reissued = drain_job.run(bigger, trigger="test", settings=load_settings())
    finally:  # other drains of the suite go on past every id in use
        with engine.begin() as conn:
            conn.execute(text("SELECT setval('runs_id_seq', (SELECT max(id) FROM runs))"))
    assert reissued.run_id == first.id and reissued.drained == 300  # written, not skipped
    assert table_run_ids(drain).count(first.id) == 2
    drain_until_empty(drain)
    # nothing lost: every offset in the table; only the old run's rows are there twice (the
    # table outlived the restored database, which forgot they were drained)
    high = high_watermarks(drain)
    seen = table_offsets(drain)
    assert set(seen) == {(t, p, o) for (t, p), end in high.items() for o in range(end)}
    assert {k for k, n in seen.items() if n > 1} == set(old)
    assert sum(seen.values()) == total + len(old)
    assert all(r.status == "committed" for r in runs_of(drain))


def test_failures_of_the_attempt_whose_write_landed_are_the_ones_committed(make_drain, lakehouse):
    """Attempt keys. Attempt 1 wrote the table (its poison records failed, staged as its own)
    and crashed; attempt 2 of the same run staged other outcomes (here: a failure for every
    record after a poison one, all of which are rows in the table). Before: the commit
    counted whatever was staged last, so records in the table were dead-lettered too and the
    landed attempt's failures could go missing. Now: sink rows + dead letters = records, by
    distinct offsets, none in both."""
    from test_retention import POISON_ECHO, _records

    from tests.support.stack import produce_records

    poison = {3, 11}
    drain = make_drain(
        sink=sink_of("iceberg"),
        levels=1,
        partitions=1,
        budget=1000,
        **{**POISON_ECHO, "max_attempts": 1},
    )
    topic = drain.level_topic(0)
    produce_records(drain, _records(20, poison_at=poison), level=0, partition=0)
    run_id = _crash_after_table_commit(drain)
    with get_engine().begin() as conn:
        landed = conn.execute(
            text("SELECT attempt FROM run_table_proofs WHERE run_id = :r"), {"r": run_id}
        ).scalar()
        assert landed == 1
        # a later attempt's differing outcome, staged beside the landed one's
        conn.execute(
            text(
                'INSERT INTO record_failures (run_id, attempt, topic, partition, "offset", '
                'held_back, error) SELECT run_id, 2, topic, partition, "offset" + 1, false, '
                "'attempt 2 failed it' FROM record_failures WHERE run_id = :r AND attempt = 1"
            ),
            {"r": run_id},
        )
    drain_until_empty(drain)
    rows = {o for (t, p, o) in table_offsets(drain) if (t, p) == (topic, 0)}
    with get_engine().connect() as conn:
        dead = {
            r.offset
            for r in conn.execute(
                text('SELECT "offset" FROM dead_letters WHERE drain = :d'), {"d": drain.name}
            )
        }
    assert dead == poison  # the landed attempt's failures, not attempt 2's
    assert rows | dead == set(range(20)) and not rows & dead


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_abandon_right_after_a_client_died_mid_write_writes_nothing_twice(
    make_drain, lakehouse, fmt
):
    """The client died as the table's files appeared (`during_spark`); the Connect server may
    go on with its write. Abandon right then: it stops the plan's tagged operations first, then
    looks for the commit, so the write cannot land after the look. Whether the server's write
    was still running when abandon came is not controlled here (both outcomes are accepted and
    checked); what the test holds is that neither writes a record twice. Before: abandon looked
    at nothing, and a write that landed after it was written again by the next plan."""
    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    crashed = cli("run", drain.name, fault="during_spark")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    abandon = cli("plan", "abandon", drain.name, "--reason", "the client died mid-write")
    # either it found the write landed (refused: run again completes it) or it abandoned a
    # plan whose write can no longer land
    assert abandon.returncode in (0, 2), abandon.stderr[-3000:]
    if abandon.returncode == 2:
        assert "already committed" in abandon.stderr
    drain_until_empty(drain)
    seen = table_offsets(drain)
    high = high_watermarks(drain)
    assert sum(high.values()) == total
    assert not {k: n for k, n in seen.items() if n > 1}, "records written twice"
    assert set(seen) == {(t, p, o) for (t, p), end in high.items() for o in range(end)}


def test_a_delta_runs_commit_read_from_its_log_is_the_one_spark_shows(
    make_drain, lakehouse, monkeypatch
):
    """A run on a Spark that shares this machine's files finds its commit in the table's log
    folder (drainer.sinks.delta_log), not through `DESCRIBE HISTORY`: for each run both ways
    find the same commit, the one on record in Postgres as the run's proof."""
    import spark_jobs.sinks.delta as delta_sink
    from drainer.sinks import SinkCommit
    from drainer.store import runs
    from spark_jobs.session import get_spark, shares_files
    from spark_jobs.sinks import spark_sink_for

    drain = make_drain(sink=sink_of("delta"), budget=BUDGET, **DATAFRAME_MODE)
    produce_backlog(drain, PER_PARTITION)
    drain_until_empty(drain)
    settings = load_settings()
    sink = spark_sink_for(drain.sink, settings, drain.name)
    spark = get_spark(settings, sink_conf=sink.session_conf())
    assert shares_files(spark, settings)  # else both ways below would be Spark's
    with get_engine().connect() as conn:
        done = conn.execute(
            text("SELECT id, nonce FROM runs WHERE drain = :d AND status = 'committed'"),
            {"d": drain.name},
        ).all()
        proofs = {r.id: runs.table_proof(conn, r.id) for r in done}
    assert len(done) >= 2

    def found(via_log: bool) -> dict[int, SinkCommit | None]:
        reads = []
        monkeypatch.setattr(delta_sink, "shares_files", lambda *_: via_log)
        monkeypatch.setattr(
            delta_sink, "latest_commits", lambda *a: reads.append(a) or latest_commits(*a)
        )
        commits = {
            r.id: sink._commit_of(spark, drain.name, r.id, r.nonce, latest=RECENT_COMMITS)
            for r in done
        }
        assert bool(reads) == via_log
        return commits

    from_log, from_spark = found(via_log=True), found(via_log=False)
    assert from_log == from_spark
    for run_id, commit in from_log.items():
        attempt, recorded = proofs[run_id]
        assert commit is not None and commit.id == recorded["version"]
        assert commit == dataclasses.replace(SinkCommit.from_dict(recorded), attempt=attempt)
