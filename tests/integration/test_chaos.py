"""Issues 8, 17 and 20: kill -9 at random moments never loses or duplicates a record, per sink.

200,000 records drain into Postgres, a Delta table and an Iceberg table. `drainer run` processes
(each its own process group: Python, its Spark client and workers) are killed with SIGKILL after a
random delay, at least ten times; in another round the Spark Connect server itself (its JVM and
its Python workers) is killed instead, while it writes the run's output (rows being staged for
Postgres, new data files in the table for Delta and Iceberg), and started again. A round whose
run ends or writes nothing first does not count as a server kill and is tried again. Then runs go
on until the backlog is 0. Every (topic, partition, offset) must be in the sink exactly once
(distinct offsets, not sums), and the Kafka group offsets must equal the end offsets. The seed is
printed (and can be set with CHAOS_SEED) so a failure can be replayed; CHAOS_KILLS and
CHAOS_SERVER_KILLS raise the number of kills (the suite: 10 and 1 per sink).

Issue 26 adds what could erase a table's proof of a run, or the run's footing: `drainer maintain
--retention-hours 0 --force` between kills, Postgres stopped immediately (no clean disconnect)
once during a run and the broker killed once during a run, each then started again. Each kill
is put down to the phase it landed in, read from the state it left (plan, spark, table commit,
postgres commit, mirror); a phase the random kills missed is then hit by a crash injected
there (`DRAINER_FAULT`, the process ending as a kill ends it), so every phase is hit for every
sink, and the sink still holds every offset exactly once.

Issue 27 adds a Kafka topic sink: its write is the run's open Kafka transaction, streamed from
the Connect server. Every other random kill waits for records to arrive in the output topic
(`read_uncommitted`) and lands then, the Connect server is killed twice while the run produces
(a kill the run survives, its stream already ended and committed, does not count), and the
broker round kills the broker mid-produce. A `read_committed` consumer of the output must see
every source offset exactly once (distinct `drainer.source` headers), and a `read_uncommitted`
one must also see aborted records: the kills landed inside transactions.

Issue 48 adds state tables (`write: upsert`) into Postgres, Delta and Iceberg under the same
kills, lost services and injected crashes: test_state_tables' records (versions of a key spread
over the levels, deletes by `op` and by tombstones, older updates drained after a delete) in
many small runs. The table, read without Spark, must equal the model, and nothing may be
merged twice: the table's commits that name a run are each committed run's one merge.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from broker_kill import kill_broker
from confluent_kafka import Consumer, TopicPartition
from kafka_output import auto_producer, output_topic, read_output
from lifecycle_helpers import CLI, sink_records
from offsets import high_watermarks, kafka_offsets, states, stored_offsets
from sqlalchemy import text
from test_exactly_once import runs_of
from test_lakehouse import sink_of, table_offsets
from test_state_tables import VALUE as STATE_VALUE
from test_state_tables import live_rows, merge_commits, produce_state
from test_state_tables import sink_of as state_sink_of

from drainer import faults
from drainer.config import DrainConfig
from drainer.kafka.producer import OutRecord, synthetic_records
from drainer.observe.status import drain_status
from drainer.services import connect, kafka, postgres, process
from drainer.services.pg_layout import layout
from drainer.settings import load_settings
from drainer.sinks import sink_for
from drainer.spark.net import port_open
from drainer.store import runs, sink_tables
from drainer.store.runs import StoredRun
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.drains import STACK_FORMATS
from tests.support.stack import get_engine, produce_records

# it kills and restarts the Connect server, Postgres and the broker every test shares
pytestmark = pytest.mark.serial

RECORDS = 200_000
KILLS = int(os.environ.get("CHAOS_KILLS") or 10)  # of the run's process group
# of the Spark Connect server, while it writes the run's output: each costs a server restart
# and a failed run (about 30 s), so the suite kills it once per sink; more with the variable
SERVER_KILLS = int(os.environ.get("CHAOS_SERVER_KILLS") or 1)
LEVELS, PARTITIONS = 2, 2
BUDGET = 12_000  # many runs' worth of backlog: kills land in fresh plans and resumed ones alike
SINKS: dict[str, dict[str, Any]] = {
    "postgres": {
        "mode": "record",
        "handler": "spark_jobs.examples:record_echo",
        "output_schema": RECORD_ECHO_SCHEMA,
        "ordering": "partition",
    },
    "delta": {"mode": "dataframe", "processor": "spark_jobs.examples:one_row_per_record"},
    "iceberg": {"mode": "dataframe", "processor": "spark_jobs.examples:one_row_per_record"},
    # every output record names its source record in its `drainer.source` header
    "kafka": {"mode": "dataframe", "processor": "spark_jobs.examples:kafka_passthrough"},
}
# issue 48's state tables: the variant's name -> the table sink it merges into
UPSERTS = {f"{fmt}-upsert": fmt for fmt in ("postgres", "delta", "iceberg")}
SINKS |= {
    name: {
        "mode": "dataframe",
        "processor": None,
        "value": STATE_VALUE,
        "key": {"format": "string"},
    }
    for name in UPSERTS
}
# test_state_tables' 10,000 records in ~25 runs: kills land in fresh plans and resumed ones
STATE_BUDGET = 400
# the Kafka sink's write is its open transaction; a server killed while the run streams its
# rows aborts it, so it is killed twice (the suite's others once)
MIN_SERVER_KILLS = {"kafka": 2}
MAINTAIN_EVERY = 3  # rounds between `drainer maintain --retention-hours 0 --force`
# where a kill can land, and the crash point that lands one there when random kills did not
PHASES = {
    "plan": "after_plan",
    "spark": "during_spark",
    "table commit": "after_table_commit",
    "postgres commit": "after_commit",
    "mirror": faults.MIRROR_POINT,
}


def _backlog(drain: DrainConfig) -> int:
    return sum(p.backlog for p in states(drain, list(range(LEVELS))))


def _start_run(
    drain: DrainConfig, log: IO[str], fault: str | None = None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_FAULT"}
    if fault is not None:
        env["DRAINER_FAULT"] = fault
    return subprocess.Popen(
        [*CLI, "run", drain.name],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,  # its own process group: the kill takes its workers too
    )


def _parquet_files(drain: DrainConfig) -> set[Path]:
    folder = sink_for(drain.sink, load_settings()).data_folder()
    return set(folder.rglob("*.parquet")) if folder is not None and folder.exists() else set()


def _staged(drain: DrainConfig) -> int:
    """Rows the drain's open plan has staged so far (0 with no open plan or stage)."""
    with get_engine().connect() as conn:
        run = runs.open_run(conn, drain.name)
        return 0 if run is None else sink_tables.staged_rows(conn, drain.sink.table, run.id)


def _wait_for_writes(drain: DrainConfig, proc: subprocess.Popen[bytes], wait_s: float) -> bool:
    """Wait until the run's output is being written: rows staged since the last look (Postgres:
    a stage a killed attempt left does not grow), new data files in the table (lakehouse), or
    records arriving in the output topic inside the run's open transaction (Kafka).
    False if the run ended first or nothing was written within `wait_s`."""
    if drain.sink.type == "kafka":
        return _wait_for_produce(drain, proc, wait_s)
    table = drain.sink.type != "postgres"
    files = _parquet_files(drain) if table else set()
    rows = 0 if table else _staged(drain)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        if table:
            if _parquet_files(drain) - files:
                return proc.poll() is None
        else:
            now = _staged(drain)
            if now > rows:
                return proc.poll() is None
            rows = now  # lower once the attempt cleared what a killed one staged
        time.sleep(0.02)
    return False


def _wait_for_produce(drain: DrainConfig, proc: subprocess.Popen[bytes], wait_s: float) -> bool:
    """Wait until records arrive in the output topic: the run's transaction is open. One
    consumer, polled every few ms (the produce step is short); read_uncommitted, whose end
    offset moves as records arrive (read_committed's moves only at the commit)."""
    topic = drain.sink.topic
    consumer = Consumer(
        {
            "bootstrap.servers": load_settings().bootstrap_servers,
            "group.id": "chaos-watch",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        parts = [
            TopicPartition(topic, p)
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ]

        def end() -> int:
            return sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts)

        before = end()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and proc.poll() is None:
            if end() > before:
                return proc.poll() is None
            time.sleep(0.005)
        return False
    finally:
        consumer.close()


def _writing_or_killed(drain: DrainConfig, proc: subprocess.Popen[bytes], wait_s: float) -> bool:
    """True once the run writes its output; else the run is killed (if still alive) and False."""
    if _wait_for_writes(drain, proc, wait_s):
        return True
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return False


def _kill_server_mid_write(
    drain: DrainConfig, proc: subprocess.Popen[bytes], wait_s: float
) -> bool:
    """Kill the Connect server (JVM and Python workers) while it writes the run's output, then
    start it again; True if so. The run's client then fails, or is killed 3 s after the
    restart; its plan stays open.

    If the run ended or wrote nothing within `wait_s`, the server is left alone and the run is
    killed instead (not counted: the round is tried again).
    """
    if not _writing_or_killed(drain, proc, wait_s):
        return False
    settings = load_settings()
    paths = connect.ConnectPaths.local(settings)
    pid = process.our_pid(paths.pid_file, connect.MARKER)
    assert pid is not None, "the Connect server the tests share is not running"
    killed_temp_dirs = set(paths.scratch.iterdir())  # left by the kill: the next start empties
    os.killpg(pid, signal.SIGKILL)  # started in a session of its own: its workers go too
    gone = time.monotonic() + 30
    while process.our_pid(paths.pid_file, connect.MARKER) or port_open(
        connect.HOST, settings.connect_port
    ):
        assert time.monotonic() < gone, f"the killed Connect server {pid} is still there"
        time.sleep(0.1)  # or `up` would find it still answering and start nothing
    t0 = time.monotonic()
    connect.up(settings, echo=lambda *_: None, formats=STACK_FORMATS)
    t1 = time.monotonic()
    assert killed_temp_dirs and not killed_temp_dirs & set(paths.scratch.iterdir())
    try:  # the client has had the restart's time to fail; its retries would take ~10 s more
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    print(
        f"Connect server restarted in {t1 - t0:.1f} s; the run's client ended "
        f"{time.monotonic() - t1:.1f} s later (exit {proc.returncode})"
    )
    return True


def _latest_run(drain: DrainConfig) -> StoredRun | None:
    with get_engine().connect() as conn:
        latest = runs.recent_runs(conn, drain.name, 1)
        return runs.get_run(conn, latest[0].id) if latest else None


def _phase_of_kill(drain: DrainConfig, before: StoredRun | None) -> str:
    """The phase a killed run was in, read from what it left behind."""
    run = _latest_run(drain)
    if run is None or (
        before is not None
        and run.id == before.id
        and run.attempts == before.attempts
        and run.status == before.status
    ):
        return "plan"  # nothing stored or started since: killed planning (or before it)
    if run.status == "planned":
        return "plan"
    if run.status in ("running", "failed"):
        with get_engine().connect() as conn:
            proof = conn.scalar(
                text("SELECT count(*) FROM run_table_proofs WHERE run_id = :r"), {"r": run.id}
            )
        return "table commit" if proof else "spark"
    # committed: the kill came after the Postgres commit; mirrored to Kafka yet or not
    with get_engine().connect() as conn:
        behind = conn.scalar(
            text(
                "SELECT count(*) FROM partition_offsets WHERE drain = :d "
                "AND mirrored_offset IS DISTINCT FROM committed"
            ),
            {"d": drain.name},
        )
    return "postgres commit" if behind else "mirror"


def _maintain(drain: DrainConfig) -> None:
    """What an operator's maintenance does between runs: zero retention, forced."""
    started = time.monotonic()
    done = subprocess.run(
        [*CLI, "maintain", drain.name, "--retention-hours", "0", "--force"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"maintained in {time.monotonic() - started:.1f} s")


def _lose_service_mid_run(
    drain: DrainConfig, proc: subprocess.Popen[bytes], service: str, wait_s: float
) -> bool:
    """Stop Postgres immediately, or kill the broker, while the run writes; start it again.

    False (the run killed instead) if the run ended or wrote nothing within `wait_s`."""
    if not _writing_or_killed(drain, proc, wait_s):
        return False
    settings = load_settings()
    if service == "postgres":
        pid = process.read_pid(layout(settings.home, create=False).data / "postmaster.pid")
        assert pid is not None
        os.kill(pid, signal.SIGQUIT)  # the postmaster's immediate shutdown: no clean goodbye
        while process.is_alive(pid):
            time.sleep(0.1)
        postgres.up(settings, echo=lambda *_: None)
    else:
        pid = process.our_pid(kafka.KafkaPaths.under(settings.home).pid_file, kafka.MARKER)
        assert pid is not None, "the broker the tests share is not running"
        kill_broker(pid, settings)
        kafka.up(settings, echo=lambda *_: None)
    try:  # the run fails on the lost service (its plan stays open), or finishes
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    print(f"lost {service} while the run wrote; started again (run exit {proc.returncode})")
    return True


def _later(pending: dict[int, str], round_: int, special: str) -> None:
    """Put a special round off to the first later round that has none (none is dropped)."""
    later = round_ + 1
    while later in pending:
        later += 1
    pending[later] = special


def _sink_offsets(drain: DrainConfig) -> Counter:
    if drain.sink.type == "kafka":  # distinct source coordinates, as read_committed sees them
        return _output_sources(drain, "read_committed")
    return sink_records(drain) if drain.sink.type == "postgres" else table_offsets(drain)


def _output_sources(drain: DrainConfig, isolation: str) -> Counter:
    """(topic, partition, offset) of each output record's source, as `isolation` reads them."""
    seen: Counter = Counter()
    for record in read_output(drain.sink.topic, isolation):
        assert record.source is not None, "an output record names no source record"
        topic, partition, offset = record.source.split("/")
        seen[(topic, int(partition), int(offset))] += 1
    return seen


@pytest.fixture
def sink_block(sink: str, lakehouse) -> Iterator[dict[str, Any]]:
    """The drain's `sink:` setting for the variant; the Kafka sink's output topic made fresh."""
    if sink == "kafka":
        with output_topic(PARTITIONS) as out:
            yield {"sink": {"type": "kafka", "topic": out}}
    elif sink in UPSERTS:
        yield {"sink": state_sink_of(UPSERTS[sink]), "budget": STATE_BUDGET}
    else:
        yield {} if sink == "postgres" else {"sink": sink_of(sink)}


@pytest.mark.slow
@pytest.mark.timeout(2400)  # many crash-and-resume rounds, server restarts
@pytest.mark.parametrize("sink", list(SINKS))
def test_kill_minus_9_at_random_moments_loses_and_duplicates_nothing(
    make_drain, spark, lakehouse, sink, sink_block
):
    seed = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000)
    producer = auto_producer(spark)  # asked now: the session's server is killed below
    print(f"chaos seed: {seed} (replay with CHAOS_SEED={seed})")
    rng = random.Random(seed)
    drain = make_drain(
        levels=LEVELS, partitions=PARTITIONS, **{"budget": BUDGET, **sink_block}, **SINKS[sink]
    )
    per_partition = RECORDS // (LEVELS * PARTITIONS)
    if sink in UPSERTS:  # key -> its live newest version
        model = produce_state(drain, seed=rng.randrange(1 << 30))
    else:
        for level in range(LEVELS):
            for partition in range(PARTITIONS):
                records = synthetic_records(per_partition, keys=97, value_size=20, seed=partition)
                produce_records(drain, records, level=level, partition=partition)
        assert _backlog(drain) == RECORDS

    settings = load_settings()
    # special rounds, never the first: the Connect server mid-write, and (our own services
    # only) Postgres and the broker mid-run
    server_target = max(SERVER_KILLS, MIN_SERVER_KILLS.get(sink, 0))
    specials = ["server"] * server_target
    specials += ["postgres"] if settings.local_postgres else []
    specials += ["broker"] if settings.local_kafka else []
    rounds = KILLS + len(specials)
    pending = dict(zip(rng.sample(range(1, rounds + 1), len(specials)), specials, strict=True))
    phases: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    wanted = [p for p in PHASES if drain.sink.type != "postgres" or p != "table commit"]
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        # an undisturbed run tells how long a run takes here; kills then fall anywhere in it
        started = time.monotonic()
        proc = _start_run(drain, log)
        assert proc.wait(timeout=600) == 0, _tail(log)
        duration = time.monotonic() - started
        kills, missed, completed, round_ = 0, 0, 1, 0
        try:
            while kills < KILLS or pending or set(wanted) - set(phases):
                assert _backlog(drain) > 0, "the backlog ran out before the kills: lower BUDGET"
                round_ += 1
                print(f"round {round_} at {time.monotonic() - t0:.1f} s")  # where the time goes
                if round_ % MAINTAIN_EVERY == 0:
                    _maintain(drain)  # between kills: what an open plan committed must stay
                before = _latest_run(drain)
                special = pending.pop(round_, None)
                if special is not None and kills == 0:  # a run killed first: the footing
                    _later(pending, round_, special)
                    special = None
                if special is None and kills >= KILLS and not pending:
                    # the random kills missed a phase: crash there, as a kill would end it
                    phase = next(p for p in wanted if p not in phases)
                    proc = _start_run(drain, log, fault=PHASES[phase])
                    code = proc.wait(timeout=600)
                    if code == 0:  # it never passed that point (a resumed run whose table
                        print(f"the run passed no {PHASES[phase]}: again")  # commit had landed)
                        continue
                    assert code == faults.EXIT_CODE, _tail(log)
                    phases[_phase_of_kill(drain, before)] += 1
                    print(f"crashed at {PHASES[phase]}: a kill in phase {phase}")
                    continue
                delay = rng.uniform(0.2, duration * 1.1)
                started = time.monotonic()
                proc = _start_run(drain, log)
                if special is not None:
                    wait_s = max(60.0, 3 * duration)
                    hit = (
                        _kill_server_mid_write(drain, proc, wait_s)
                        if special == "server"
                        else _lose_service_mid_run(drain, proc, special, wait_s)
                    )
                    if hit and special == "server" and sink == "kafka" and proc.returncode == 0:
                        hit = False  # its stream had ended: the run committed before the kill
                    if hit:
                        lost[special] += 1
                        print(f"lost the {special} while the run wrote (round {round_})")
                    else:  # the run ended, or wrote nothing: not a kill mid-write, try again
                        missed += 1
                        assert missed <= 3, f"{missed} runs ended before the {special} was lost"
                        _later(pending, round_, special)
                    continue
                mid_produce = sink == "kafka" and kills % 2 == 1  # every other kill
                if mid_produce and _wait_for_writes(drain, proc, max(60.0, 3 * duration)):
                    delay = 0.0  # now, inside the run's open transaction
                try:
                    code = proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=60)
                    kills += 1
                    phase = _phase_of_kill(drain, before)
                    phases[phase] += 1
                    print(f"killed run process after {delay:.1f} s, in phase {phase}")
                    continue
                # after a lost service a run may still fail on it once (exit 2; plan kept)
                assert code == 0 or (code == 2 and lost), _tail(log)
                completed += 1
                duration = time.monotonic() - started
                print(f"run process finished within {delay:.1f} s (took {duration:.1f} s)")
        finally:  # the rest of the suite shares these services
            postgres.up(settings, echo=lambda *_: None)
            kafka.up(settings, echo=lambda *_: None)
            connect.up(load_settings(), echo=lambda *_: None, formats=STACK_FORMATS)
    server_kills = lost["server"]
    print(f"kills by phase: {dict(phases)}; services lost mid-run: {dict(lost)}")
    assert set(wanted) <= set(phases), f"phases never hit: {set(wanted) - set(phases)}"
    assert lost["postgres"] == int(settings.local_postgres)
    assert lost["broker"] == int(settings.local_kafka)
    print(
        f"{kills} run kills, {server_kills} Connect server kills mid-write, {completed} completed "
        f"runs in {time.monotonic() - t0:.1f} s; one run takes {duration:.1f} s"
    )
    assert kills >= KILLS and server_kills >= server_target
    t0 = time.monotonic()

    # the rest in this process (its session replaced: the server it knew was killed): first
    # whatever plan the last kill left open (resumed as planned), then one run for all the rest
    whole = drain.model_copy(update={"budget": RECORDS})
    final_runs = 0
    while _backlog(drain) > 0:
        final_runs += 1
        assert final_runs <= 3, f"backlog {_backlog(drain)} is not shrinking"
        drain_job.run(whole, trigger="test", settings=load_settings())

    print(f"drained the rest in {final_runs} runs, {time.monotonic() - t0:.1f} s")
    if sink in UPSERTS:
        _state_table_is_the_model(drain, model)
    else:
        _every_offset_once(drain, sink, producer, per_partition)
    ends = high_watermarks(drain)
    assert stored_offsets(drain) == {key: (end, "") for key, end in ends.items()}
    assert kafka_offsets(drain) == {key: (end, "") for key, end in ends.items()}


def _state_table_is_the_model(drain: DrainConfig, model: dict[str, tuple[str, int]]) -> None:
    """The state table equals the model, and each committed run merged once: a Postgres run's
    merge is its commit transaction (its counts recorded once, by every committed run); a
    Delta or Iceberg table's commits that name a run name each run once, and only runs whose
    commit Postgres recorded (Delta: exactly those; Iceberg: those still on main's line, which
    `maintain` shortens by expiring snapshots)."""
    live = live_rows(drain)
    wrong = {
        k: (live.get(k), model.get(k))
        for k in set(live) | set(model)
        if live.get(k) != model.get(k)
    }
    assert not wrong, f"{len(wrong)} keys differ (table, model): {list(wrong.items())[:5]}"
    committed = sorted(r.id for r in runs_of(drain) if r.status == "committed")
    if drain.sink.type == "postgres":
        with get_engine().connect() as conn:
            counted = conn.scalars(
                text("SELECT run_id FROM run_upsert_counts WHERE run_id = ANY(:r)"),
                {"r": committed},
            ).all()
        assert sorted(counted) == committed
        return
    in_table = merge_commits(drain)
    twice = {r: n for r, n in Counter(in_table).items() if n > 1}
    assert not twice, f"runs merged more than once: {twice}"
    shown = drain_status(drain, load_settings(), recent=1000)["runs"]
    recorded = {r["id"] for r in shown if r["table_commit"]}
    assert recorded <= set(committed)
    if drain.sink.type == "delta":
        assert set(in_table) == recorded, (sorted(in_table), sorted(recorded))
    else:
        assert set(in_table) <= recorded, (sorted(in_table), sorted(recorded))


def _every_offset_once(drain: DrainConfig, sink: str, producer: str, per_partition: int) -> None:
    """Every (topic, partition, offset) is in the sink exactly once."""
    seen = _sink_offsets(drain)
    expected = {
        (drain.level_topic(level), partition, offset)
        for level in range(LEVELS)
        for partition in range(PARTITIONS)
        for offset in range(per_partition)
    }
    duplicated = {key: n for key, n in seen.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} records written twice, e.g. {list(duplicated)[:5]}"
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} records never written, e.g. {sorted(missing)[:5]}"
    assert set(seen) == expected
    if sink == "kafka":  # the kills landed inside transactions: their aborted records exist
        uncommitted = _output_sources(drain, "read_uncommitted")
        aborted = sum(uncommitted.values()) - sum(seen.values())
        print(f"output: {sum(seen.values())} records read_committed, {aborted} more aborted")
        assert set(uncommitted) == expected and aborted > 0
        # the runs that produced did so where `producer: auto` says (a found marker: none)
        produced_by = {
            r["table_commit"]["details"].get("producer")
            for r in drain_status(drain, load_settings(), recent=1000)["runs"]
            if r["table_commit"]
        }
        assert producer in produced_by and produced_by <= {producer, None}, produced_by


def _tail(log: IO[str]) -> str:
    log.seek(0)
    return log.read()[-4000:]


# ---------------------------------------------------------------- issue 49: routed tables

ROUTED_TYPES = ["clicks", "orders", "refunds"]  # in name order: a run commits them so
ROUTED_DDL = "event_type string, order_id long, amount double, page string"
ROUTED_RECORDS = 60_000
ROUTED_KILLS = int(os.environ.get("CHAOS_ROUTED_KILLS") or 6)


def _routed_table_offsets(drain: DrainConfig, suffix: str) -> dict[str, Counter]:
    """Each routed Delta table's (topic, partition, offset), read without Spark; every row's
    `event_type` must be its table's."""
    from deltalake import DeltaTable

    found = {}
    for event_type in ROUTED_TYPES:
        path = Path(load_settings().warehouse) / f"routes_{suffix}" / event_type
        rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        assert {r["event_type"] for r in rows} == {event_type}
        found[event_type] = Counter((r["_topic"], r["_partition"], r["_offset"]) for r in rows)
    return found


def _runs_in_table(suffix: str, event_type: str) -> list[int]:
    import json

    from deltalake import DeltaTable

    path = Path(load_settings().warehouse) / f"routes_{suffix}" / event_type
    if not path.exists():
        return []
    return [
        json.loads(h["userMetadata"])["drainer.run-id"]
        for h in DeltaTable(str(path)).history()
        if h.get("userMetadata")
    ]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_kill_minus_9_with_routed_tables_keeps_every_table_exactly_once(
    make_drain, spark, lakehouse
):
    """A drain routing 3 event types to 3 Delta tables: killed at random (kill -9 of the run's
    process group), crashed between two tables' commits by the named crash point (certain, where
    a random kill only may land), and its Connect server killed once mid-write; then drained to
    the end. Every table holds exactly its own records once, and the offsets are the ends."""
    import uuid

    seed = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000)
    print(f"chaos seed: {seed} (replay with CHAOS_SEED={seed})")
    rng = random.Random(seed)
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=LEVELS,
        partitions=PARTITIONS,
        budget=BUDGET,
        value={"format": "json", "schema": ROUTED_DDL},
        bad_records="dead_letter",
        sink={"type": "delta", "path": f"routes_{suffix}/{{event_type}}"},
    )
    per_partition = ROUTED_RECORDS // (LEVELS * PARTITIONS)
    for level in range(LEVELS):
        for partition in range(PARTITIONS):
            records = [
                OutRecord(
                    value=f'{{"event_type": "{ROUTED_TYPES[i % 3]}", "order_id": {i}}}'.encode(),
                    key=f"k{i % 11}".encode(),
                )
                for i in range(per_partition)
            ]
            produce_records(drain, records, level=level, partition=partition)
    assert _backlog(drain) == ROUTED_RECORDS

    kills, server_kills, missed, crashed_between = 0, 0, 0, False
    with tempfile.TemporaryFile("w+") as log:
        started = time.monotonic()
        proc = _start_run(drain, log)
        assert proc.wait(timeout=600) == 0, _tail(log)
        duration = time.monotonic() - started
        try:
            while kills < ROUTED_KILLS or server_kills < 1 or not crashed_between:
                assert _backlog(drain) > 0, "the backlog ran out before the kills: lower BUDGET"
                if not crashed_between:  # first, after a committed run: a fresh plan
                    proc = _start_run(drain, log, fault=faults.BETWEEN_TABLES)
                    assert proc.wait(timeout=600) == faults.EXIT_CODE, _tail(log)
                    run = _latest_run(drain)
                    assert run is not None and run.status != "committed"
                    # the race happened: the first table holds the run, the next does not
                    assert run.id in _runs_in_table(suffix, ROUTED_TYPES[0])
                    assert run.id not in _runs_in_table(suffix, ROUTED_TYPES[-1])
                    crashed_between = True
                    print(f"crashed run {run.id} between two tables' commits")
                    continue
                if kills >= 3 and server_kills < 1:
                    proc = _start_run(drain, log)
                    if _kill_server_mid_write(drain, proc, max(60.0, 3 * duration)):
                        server_kills += 1
                    else:
                        missed += 1
                        assert missed <= 3, f"{missed} runs ended before the server was killed"
                    continue
                delay = rng.uniform(0.2, duration * 1.1)
                started = time.monotonic()
                proc = _start_run(drain, log)
                try:
                    code = proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=60)
                    kills += 1
                    print(f"killed run process after {delay:.1f} s")
                    continue
                assert code == 0 or (code == 2 and server_kills), _tail(log)
                duration = time.monotonic() - started
        finally:  # the rest of the suite shares the server
            connect.up(load_settings(), echo=lambda *_: None, formats=STACK_FORMATS)

    whole = drain.model_copy(update={"budget": ROUTED_RECORDS})
    final_runs = 0
    while _backlog(drain) > 0:
        final_runs += 1
        assert final_runs <= 3, f"backlog {_backlog(drain)} is not shrinking"
        drain_job.run(whole, trigger="test", settings=load_settings())

    tables = _routed_table_offsets(drain, suffix)
    seen = sum(tables.values(), Counter())
    duplicated = {key: n for key, n in seen.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} records written twice, e.g. {list(duplicated)[:5]}"
    expected = {
        (drain.level_topic(level), partition, offset)
        for level in range(LEVELS)
        for partition in range(PARTITIONS)
        for offset in range(per_partition)
    }
    assert set(seen) == expected
    for i, event_type in enumerate(ROUTED_TYPES):  # each record in its own type's table
        assert all(offset % 3 == i for _, _, offset in tables[event_type])
    ends = high_watermarks(drain)
    assert stored_offsets(drain) == {key: (end, "") for key, end in ends.items()}
    assert kafka_offsets(drain) == {key: (end, "") for key, end in ends.items()}
