"""Issue 3 acceptance on the real stack: allocation with history, backfills and event time.

Every test drives real Spark runs (`spark_jobs.drain_job.run` or a Dagster materialization)
against the real broker and Postgres, and checks the plans stored in `runs`, `run_levels` and
`run_ranges`, and what `drainer plan --json` reports, against numbers worked out by hand from
docs/allocation.md. Budget 7000 over 3 exponential levels reserves 1000 / 2000 / 4000.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from offsets import level_watermarks, mirrored_offsets, states
from sqlalchemy import text

from drainer.kafka.producer import OutRecord, synthetic_records
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.planning import plan_next_run
from drainer.settings import load_settings
from drainer.store.history import level_history
from drainer.store.leases import ensure_drain
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records

# --- helpers --------------------------------------------------------------------------------------


def _produce(drain, level: int, partition: int, count: int, seed: int = 0) -> None:
    """`count` records into one partition of a level (explicit, so splits are exact)."""
    produce_records(
        drain, synthetic_records(count, keys=5, seed=seed), level=level, partition=partition
    )


def _produce_times(drain, level: int, partition: int, stamps_ms: list[int]) -> None:
    records = (
        OutRecord(value=json.dumps({"i": i}).encode(), key=b"k", timestamp_ms=ts)
        for i, ts in enumerate(stamps_ms)
    )
    produce_records(drain, records, level=level, partition=partition)


def _plan_cli(drain, *args: str) -> dict:
    """`drainer plan <drain> [args] --json` in a subprocess, as an operator would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "plan", drain.name, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _levels_of(plan_json: dict) -> dict[int, dict]:
    return {lv["level"]: lv for lv in plan_json["levels"]}


def _cli_ranges(plan_json: dict) -> list[tuple[int, int, int, int, int]]:
    return [
        (r["level"], r["partition"], r["start"], r["end"], r["records"])
        for r in plan_json["ranges"]
    ]


def _stored_ranges(run_id: int) -> list[tuple[int, int, int, int, int]]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT level, partition, start_offset, end_offset, records FROM run_ranges "
                "WHERE run_id = :r ORDER BY level DESC, partition"
            ),
            {"r": run_id},
        )
        return [tuple(row) for row in rows]


def _stored_levels(run_id: int) -> dict[int, dict]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT level, reserved, burst, allocated, backlog_before, planned, drained, "
                "fill_ratio FROM run_levels WHERE run_id = :r"
            ),
            {"r": run_id},
        ).mappings()
        return {row["level"]: dict(row) for row in rows}


def _db_state(drain) -> tuple[list[tuple], list[tuple]]:
    """Everything a run would change in Postgres: its runs and the partition offsets."""
    with get_engine().connect() as conn:
        runs = conn.execute(
            text("SELECT id, status, levels FROM runs WHERE drain = :d ORDER BY id"),
            {"d": drain.name},
        ).all()
        offsets = conn.execute(
            text(
                "SELECT topic, partition, committed, offset_map FROM partition_offsets "
                "WHERE drain = :d ORDER BY topic, partition"
            ),
            {"d": drain.name},
        ).all()
    return [tuple(r) for r in runs], [tuple(o) for o in offsets]


def _kafka_groups(drain) -> dict[int, dict]:
    marks = level_watermarks(drain, range(drain.levels))
    found = {}
    for level in range(drain.levels):
        keys = [(drain.level_topic(lvl), p) for (lvl, p) in marks if lvl == level]
        found[level] = mirrored_offsets(drain, level, keys)
    return found


# --- 1. event-time alignment --------------------------------------------------------------------


def test_event_time_alignment_holds_the_ahead_partition_until_the_other_catches_up(
    make_drain, spark
):
    """Level 0 partition 0: 300 records 1 s apart from t0. Partition 1: 200 records 1 s apart
    from t0 + 200 s (ahead). max_gap 30 s, budget 140 (level 0 reserves 20; the other levels
    are empty and hand their 120 on).

    Partition 0 is behind, so it reads its whole allocation; partition 1 reads only records at
    most 30 s past what the run reaches in partition 0, and waits while even its next one is
    later. Run 1: partition 0 reads 140 (to t0 + 139 s), partition 1 waits. Run 2: water level
    85: partition 0 reaches t0 + 224 s, partition 1 reads to t0 + 254 s (55 records). Run 3:
    70 / 70. Run 4: partition 0's last 5 empty it, so it holds nobody back: partition 1 reads
    its last 75. Four runs, as many as 500 records at 140 per run need.
    """
    drain = make_drain(budget=140, max_gap_seconds=30)
    # two days back: timestamps in the past are always accepted by the broker
    t0 = (int(time.time()) // 60 - 2 * 24 * 60) * 60_000
    _produce_times(drain, 0, 0, [t0 + i * 1000 for i in range(300)])
    _produce_times(drain, 0, 1, [t0 + 200_000 + j * 1000 for j in range(200)])

    before = _plan_cli(drain)
    assert before["held_back"] == [[0, 1]]
    (wait,) = before["alignment"]
    assert (wait["behind"], wait["reached_timestamp"]) == ([0, 0], t0 + 139_000)
    assert wait["reason"].startswith("waits: its next record is 61 s after what the run reaches")
    assert _cli_ranges(before) == [(0, 0, 0, 140, 140)]
    level0 = _levels_of(before)[0]
    assert (level0["backlog"], level0["available"], level0["planned"]) == (500, 500, 140)
    assert (level0["from_reserved"], level0["handed_on"]) == (20, 120)

    expected = [
        [(0, 0, 0, 140, 140)],
        [(0, 0, 140, 225, 85), (0, 1, 0, 55, 55)],
        [(0, 0, 225, 295, 70), (0, 1, 55, 125, 70)],
        [(0, 0, 295, 300, 5), (0, 1, 125, 200, 75)],
    ]
    for k, ranges in enumerate(expected, start=1):
        result = drain_job.run(drain, trigger="test", settings=load_settings())
        assert _stored_ranges(result.run_id) == ranges, f"run {k}"
        (level,) = [lv for lv in result.levels if lv.level == 0]
        assert level.planned == level.drained == sum(r[4] for r in ranges)

    # nothing pending: planning with max_gap still works (it used to fail for want of a lookup)
    after = _plan_cli(drain)
    assert after["ranges"] == [] and after["held_back"] == [] and after["alignment"] == []
    idle = drain_job.run(drain, trigger="test", settings=load_settings())
    assert idle.drained == 0 and _stored_ranges(idle.run_id) == []
    assert all(p.backlog == 0 for p in states(drain, [0, 1, 2]))


def _an_hour_of_lag(drain, old_records: int) -> None:
    """Level 0 partition 0: `old_records` an hour old, one a second. Level 0 partition 1 and
    level 1 partition 0: 1,000 fresh records each, one a second."""
    fresh = (int(time.time()) // 60 - 60) * 60_000  # an hour ago: sure to be in the past
    old = fresh - 3_600_000
    _produce_times(drain, 0, 0, [old + i * 1000 for i in range(old_records)])
    _produce_times(drain, 0, 1, [fresh + i * 1000 for i in range(1000)])
    _produce_times(drain, 1, 0, [fresh + i * 1000 for i in range(1000)])


def _runs_until_empty(drain) -> list[list[tuple[int, int, int, int, int]]]:
    ranges = []
    while sum(p.backlog for p in states(drain, [0, 1, 2])):
        ranges.append(
            _stored_ranges(drain_job.run(drain, trigger="test", settings=load_settings()).run_id)
        )
        assert len(ranges) < 10, ranges
    return ranges


def test_an_hour_of_lag_drains_at_full_budget_and_fresh_urgent_records_do_not_wait(
    make_drain, spark
):
    """Issue 11's example on the real broker, max_gap 60 s, budget 3,000 (reserves 428 / 857 /
    1,715). It used to read 61 records of the hour-old partition per run and nothing else.

    With 1,000 old records: one run reads all 3,000 (level 1's 1,000 and level 0's 2,000; the
    old partition is emptied, so the fresh one of level 0 does not wait for it).
    With 3,600 old records (an hour of them): run 1 reads level 1's 1,000 and 2,000 of the old
    partition, whose whole allocation that is, while the fresh partition of level 0 waits; run
    2 reads the old partition's last 1,600 and then the fresh partition's 1,000.
    """
    drain = make_drain(budget=3000, max_gap_seconds=60)
    _an_hour_of_lag(drain, 1000)
    shown = _plan_cli(drain)
    assert {lv: p["planned"] for lv, p in _levels_of(shown).items()} == {2: 0, 1: 1000, 0: 2000}
    assert shown["alignment"] == []
    assert _runs_until_empty(drain) == [
        [(1, 0, 0, 1000, 1000), (0, 0, 0, 1000, 1000), (0, 1, 0, 1000, 1000)]
    ]

    drain = make_drain(budget=3000, max_gap_seconds=60)
    _an_hour_of_lag(drain, 3600)
    shown = _plan_cli(drain)
    assert shown["held_back"] == [[0, 1]]
    assert "level 0 partition 0" in shown["alignment"][0]["reason"]
    assert _runs_until_empty(drain) == [
        [(1, 0, 0, 1000, 1000), (0, 0, 0, 2000, 2000)],
        [(0, 0, 2000, 3600, 1600), (0, 1, 0, 1000, 1000)],
    ]


def test_align_drain_makes_fresh_levels_wait_for_older_levels(make_drain, spark):
    """`align: drain` with an hour of old records in level 0: level 1's fresh records wait in
    run 1 (level 0 reads the whole budget), and read in run 2 once level 0 is emptied."""
    drain = make_drain(budget=3000, max_gap_seconds=60, align="drain")
    _an_hour_of_lag(drain, 3600)
    shown = _plan_cli(drain)
    assert shown["held_back"] == [[1, 0], [0, 1]]
    assert _runs_until_empty(drain) == [
        [(0, 0, 0, 3000, 3000)],
        [(1, 0, 0, 1000, 1000), (0, 0, 3000, 3600, 600), (0, 1, 0, 1000, 1000)],
    ]


# --- 1b. maximum wait ------------------------------------------------------------------------------


def _two_hours_behind(drain) -> None:
    """Level 0 partition 0: 300 records from two hours ago, one a second; level 0 partition 1,
    levels 1 and 2 partition 0: fresh records (10 minutes old)."""
    now = int(time.time()) * 1000
    old, fresh = now - 2 * 3_600_000, now - 600_000
    _produce_times(drain, 0, 0, [old + i * 1000 for i in range(300)])
    _produce_times(drain, 0, 1, [fresh + i * 100 for i in range(300)])
    _produce_times(drain, 1, 0, [fresh + i * 100 for i in range(1000)])
    _produce_times(drain, 2, 0, [fresh + i * 100 for i in range(1000)])


def test_max_wait_drains_records_past_their_wait_first_from_real_timestamps(make_drain, spark):
    """Budget 700 reserves 100 / 200 / 400. Without max_wait, level 0 reads 100 a run, 50 of
    them from the two-hour-old partition. With `max_wait: 1h`, its 300 late records come first:
    100 of its own share and 200 of level 1's (the lowest share that can give), level 2 keeps its
    400; after that one run nothing is older than an hour, and the next plan is the usual one."""
    usual = make_drain(budget=700)
    _two_hours_behind(usual)
    plain = _plan_cli(usual)
    assert _cli_ranges(plain) == [
        (2, 0, 0, 400, 400),
        (1, 0, 0, 200, 200),
        (0, 0, 0, 50, 50),
        (0, 1, 0, 50, 50),
    ]
    assert all(lv["late"] == lv["for_max_wait"] == 0 for lv in plain["levels"])

    drain = make_drain(budget=700, max_wait="1h")
    _two_hours_behind(drain)
    shown = _plan_cli(drain)
    levels = _levels_of(shown)
    assert {
        lv: (p["late"], p["for_max_wait"], p["from_reserved"], p["planned"])
        for lv, p in levels.items()
    } == {2: (0, 0, 400, 400), 1: (0, 0, 0, 0), 0: (300, 300, 0, 300)}
    assert 7200 <= levels[0]["oldest_age_s"] < 7200 + 120  # from the records' own timestamps
    assert levels[2]["oldest_age_s"] < 900
    assert _cli_ranges(shown) == [(2, 0, 0, 400, 400), (0, 0, 0, 300, 300)]

    result = drain_job.run(drain, trigger="test", settings=load_settings())
    assert _stored_ranges(result.run_id) == [(2, 0, 0, 400, 400), (0, 0, 0, 300, 300)]
    assert {lv.level: lv.drained for lv in result.levels} == {0: 300, 1: 0, 2: 400}

    # nothing is an hour old any more: the plan is what it would be without max_wait
    after = _plan_cli(drain)
    assert all(lv["late"] == lv["for_max_wait"] == 0 for lv in after["levels"])
    assert _cli_ranges(after) == [(2, 0, 400, 800, 400), (1, 0, 0, 200, 200), (0, 1, 0, 100, 100)]
    assert _levels_of(after)[0]["oldest_age_s"] < 900

    # the human-readable plan names the setting and the late records
    table = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "plan", drain.name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0, table.stderr
    assert "max_wait" in table.stdout and "for max wait" in table.stdout


def test_a_budget_short_of_the_late_records_reads_the_oldest_first_across_partitions(make_drain):
    """One level, two partitions, every record past `max_wait: 1h`: partition 0 holds a record
    every 20 s from 3 h ago, partition 1 one a second from 2.5 h ago. Budget 150 reads the 150
    oldest by their Kafka timestamps (found by the planner's search over time with real
    ListOffsets lookups): the 90 of partition 0's first half hour, then from 2.5 h ago both,
    up to 57 s past it: 93 and 57. The max-min fair split read 75 and 75."""
    drain = make_drain(levels=1, partitions=2, budget=150, max_wait="1h")
    now = int(time.time() * 1000)
    old, newer = now - 3 * 3_600_000, now - 150 * 60_000
    _produce_times(drain, 0, 0, [old + 20_000 * i for i in range(200)])
    _produce_times(drain, 0, 1, [newer + 1_000 * i for i in range(200)])
    shown = _plan_cli(drain)
    level = _levels_of(shown)[0]
    assert (level["late"], level["for_max_wait"], level["planned"]) == (400, 150, 150)
    assert _cli_ranges(shown) == [(0, 0, 0, 93, 93), (0, 1, 0, 57, 57)]


# --- 2. level subsets (backfills) and the history window ----------------------------------------


def test_a_run_of_levels_0_and_1_shares_the_budget_among_them_only(make_drain, materialize_levels):
    drain = make_drain(budget=7000)
    for level in range(3):
        for partition in range(2):
            _produce(drain, level, partition, 2500, seed=level * 10 + partition)

    metadata = materialize_levels(drain, [0, 1])

    # weights 1 and 2 share 7000: floor(7000/3) = 2333 for level 0, the rest (4667) for level 1
    assert (metadata["level_0_reserved"], metadata["level_1_reserved"]) == (2333, 4667)
    assert (metadata["level_0_drained"], metadata["level_1_drained"]) == (2333, 4667)
    assert metadata["drained"] == 7000
    assert not any(key.startswith("level_2_") for key in metadata)

    run_id = metadata["drain_run_id"]
    with get_engine().connect() as conn:
        assert list(conn.scalar(text("SELECT levels FROM runs WHERE id = :r"), {"r": run_id})) == [
            0,
            1,
        ]
    assert set(_stored_levels(run_id)) == {0, 1}
    # max-min fair within each level: the odd record goes to the lower partition
    assert _stored_ranges(run_id) == [
        (1, 0, 0, 2334, 2334),
        (1, 1, 0, 2333, 2333),
        (0, 0, 0, 1167, 1167),
        (0, 1, 0, 1166, 1166),
    ]

    # level 2 untouched: no stored offsets, no Kafka group offsets, its whole backlog left
    _, offsets = _db_state(drain)
    assert {topic for topic, *_ in offsets} == {drain.level_topic(0), drain.level_topic(1)}
    assert all(offset < 0 for offset, _ in _kafka_groups(drain)[2].values())
    level2 = [p for p in states(drain, [2])]
    assert sum(p.backlog for p in level2) == 5000

    # the next run over all levels shares the budget with all three weights again
    with KafkaSession(drain, load_settings()) as kafka:
        full = plan_next_run(get_engine(), drain, kafka).plan
    assert {lv: p.reserved for lv, p in full.levels.items()} == {0: 1000, 1: 2000, 2: 4000}


def test_runs_of_other_levels_do_not_enter_a_levels_history_window(make_drain, spark):
    """history_window 3, maxout_threshold 2. Two full runs in which level 0 maxes out make it
    the level that bursts. Two level-2-only backfills follow. Level 0's window must still be its
    two full runs (not [7000, 0, 0], which would end its burst); level 2's window does include
    the backfills, because they covered it."""
    drain = make_drain(budget=7000, history_window=3, maxout_threshold=2)
    _produce(drain, 0, 0, 10_000, seed=1)
    _produce(drain, 0, 1, 10_000, seed=2)
    _produce(drain, 1, 0, 200, seed=3)
    _produce(drain, 2, 1, 300, seed=4)

    first = drain_job.run(
        drain, trigger="test", settings=load_settings()
    )  # 300 + 200, and the 6500 spare to level 0
    second = drain_job.run(
        drain, trigger="test", settings=load_settings()
    )  # levels 1 and 2 empty: 7000 to level 0
    assert [lv.drained for lv in first.levels] == [300, 200, 6500]
    assert [lv.drained for lv in second.levels] == [0, 0, 7000]

    _produce(drain, 2, 0, 100, seed=5)
    backfills = [
        drain_job.run(drain, levels=[2], trigger="test", settings=load_settings()) for _ in range(2)
    ]
    assert [[(lv.level, lv.reserved, lv.drained) for lv in b.levels] for b in backfills] == [
        [(2, 7000, 100)],
        [(2, 7000, 0)],
    ]

    with get_engine().connect() as conn:
        history = level_history(conn, drain.name, [0, 1, 2], drain.history_window)
    assert history == {0: [6500, 7000], 1: [200, 0], 2: [0, 100, 0]}

    # level 0 still bursts: it takes what level 2 left unused at its best (4000 - 100) and what
    # level 1 left unused at its best (2000 - 200)
    levels = _levels_of(_plan_cli(drain))
    assert {lv: (levels[lv]["burst"], levels[lv]["allocated"]) for lv in levels} == {
        2: (-3900, 100),
        1: (-1800, 200),
        0: (5700, 6700),
    }

    # and a level-0-only backfill does not age level 2's window either
    drain_job.run(drain, levels=[0], trigger="test", settings=load_settings())
    with get_engine().connect() as conn:
        history = level_history(conn, drain.name, [0, 1, 2], drain.history_window)
    assert history[2] == [0, 100, 0]
    assert history[0] == [6500, 7000, 6500]  # the rest of level 0's 20000


def test_level_history_counts_committed_runs_that_covered_the_level(stack):
    """The window query on Postgres alone: per level, newest `window` committed runs covering
    it, oldest first; failed or open runs and other drains never count."""
    import uuid

    from drainer.config import DrainConfig

    def make(name: str) -> DrainConfig:
        return DrainConfig(
            name=name,
            topic=name,
            group=name,
            levels=3,
            budget=7000,
            sink={"table": f"sink_{name}"},
        )

    drain, other = make(f"h_{uuid.uuid4().hex[:8]}"), make(f"h_{uuid.uuid4().hex[:8]}")
    engine = get_engine()
    ensure_drain(engine, drain.row())
    ensure_drain(engine, other.row())

    def add_run(name: str, status: str, drained: dict[int, int | None]) -> None:
        with engine.begin() as conn:
            run_id = conn.scalar(
                text(
                    "INSERT INTO runs (drain, status, levels, budget, mode) "
                    "VALUES (:d, :s, :l, 7000, 'dataframe') RETURNING id"
                ),
                {"d": name, "s": status, "l": sorted(drained)},
            )
            for level, count in drained.items():
                conn.execute(
                    text(
                        "INSERT INTO run_levels (run_id, level, reserved, burst, allocated, "
                        "backlog_before, planned, drained) VALUES (:r, :l, 1, 0, 1, 0, 0, :n)"
                    ),
                    {"r": run_id, "l": level, "n": count},
                )

    add_run(drain.name, "committed", {0: 1, 1: 2, 2: 3})
    add_run(drain.name, "committed", {0: 10, 1: 20, 2: 30})
    add_run(drain.name, "committed", {2: 300})  # a backfill of level 2
    add_run(other.name, "committed", {0: 888, 1: 888, 2: 888})  # another drain
    add_run(drain.name, "committed", {0: 100, 1: 200})  # a backfill of levels 0 and 1
    add_run(drain.name, "committed", {2: 3000})
    add_run(drain.name, "failed", {0: 999, 1: 999, 2: 999})  # not committed: not history

    def history(levels: list[int], window: int) -> dict[int, list[int]]:
        with engine.connect() as conn:
            return level_history(conn, drain.name, levels, window)

    assert history([0, 1, 2], 2) == {0: [10, 100], 1: [20, 200], 2: [300, 3000]}
    assert history([0, 1, 2], 10) == {0: [1, 10, 100], 1: [2, 20, 200], 2: [3, 30, 300, 3000]}
    assert history([1], 1) == {1: [200]}

    # the failed plan is resumed and commits: it is now the newest run of every level
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET status = 'committed' WHERE drain = :d AND status = 'failed'"),
            {"d": drain.name},
        )
    assert history([0, 1, 2], 2) == {0: [100, 999], 1: [200, 999], 2: [3000, 999]}


# --- 3. history in Postgres drives burst --------------------------------------------------------


def test_a_level_that_keeps_maxing_out_bursts_into_what_the_others_leave(make_drain, spark):
    """Defaults: window 6, threshold 4. Level 2 has a big backlog; levels 0 and 1 have 300 and
    500, drained in the first run. After 3 runs nobody bursts; after the 4th, level 2 takes
    (1000 - 300) + (2000 - 500) = 2200 and levels 0 and 1 lend 700 and 1500."""
    drain = make_drain(budget=7000)
    _produce(drain, 2, 0, 20_000, seed=1)
    _produce(drain, 2, 1, 20_000, seed=2)
    _produce(drain, 1, 1, 500, seed=3)
    _produce(drain, 0, 0, 300, seed=4)

    runs = []
    for k in range(1, 5):
        runs.append(drain_job.run(drain, trigger="test", settings=load_settings()))
        plan_json = _plan_cli(drain)
        bursts = {lv: p["burst"] for lv, p in _levels_of(plan_json).items()}
        if k < 4:
            assert bursts == {0: 0, 1: 0, 2: 0}, f"after run {k}"
    assert [[lv.drained for lv in r.levels] for r in runs] == [
        [6200, 500, 300],
        [7000, 0, 0],
        [7000, 0, 0],
        [7000, 0, 0],
    ]
    levels = _levels_of(plan_json)
    assert {lv: (p["reserved"], p["burst"], p["allocated"]) for lv, p in levels.items()} == {
        2: (4000, 2200, 6200),
        1: (2000, -1500, 500),
        0: (1000, -700, 300),
    }

    # level 0 has 100 new records: within what it kept (300), so it drains them; the other
    # 200 + 500 it cannot use go to level 2 by backlog awareness
    _produce(drain, 0, 1, 100, seed=5)
    fifth = drain_job.run(drain, trigger="test", settings=load_settings())
    reports = {lv.level: lv for lv in fifth.levels}
    expected = {
        # reserved, burst, allocated, planned, drained, fill ratio
        2: (4000, 2200, 6200, 6900, 6900, 6900 / 4000),
        1: (2000, -1500, 500, 0, 0, 0.0),
        0: (1000, -700, 300, 100, 100, 0.1),
    }
    got = {
        lv: (r.reserved, r.burst, r.allocated, r.planned, r.drained, r.fill_ratio)
        for lv, r in reports.items()
    }
    assert got == expected
    stored = _stored_levels(fifth.run_id)
    assert {
        lv: (
            s["reserved"],
            s["burst"],
            s["allocated"],
            s["planned"],
            s["drained"],
            s["fill_ratio"],
        )
        for lv, s in stored.items()
    } == expected
    assert {lv: s["backlog_before"] for lv, s in stored.items()} == {
        2: 40_000 - 6200 - 3 * 7000,
        1: 0,
        0: 100,
    }


# --- 4. `drainer plan` is a dry run --------------------------------------------------------------


def test_plan_cli_shows_the_next_run_and_changes_nothing(make_drain, spark):
    drain = make_drain(budget=7000)
    _produce(drain, 2, 0, 50, seed=1)
    _produce(drain, 1, 0, 500, seed=2)
    _produce(drain, 1, 1, 600, seed=3)
    _produce(drain, 0, 0, 10_000, seed=4)
    _produce(drain, 0, 1, 100, seed=5)
    # one real run first, so the plan starts from stored offsets: 50 + 1100 + 5850 drained
    first = drain_job.run(drain, trigger="test", settings=load_settings())
    assert [lv.drained for lv in first.levels] == [50, 1100, 5850]
    _produce(drain, 2, 1, 30, seed=6)

    runs_before, offsets_before = _db_state(drain)
    groups_before = _kafka_groups(drain)

    everything = _plan_cli(drain)
    assert everything["budget"] == 7000
    levels = _levels_of(everything)
    assert {
        lv: (p["reserved"], p["burst"], p["allocated"], p["backlog"], p["planned"])
        for lv, p in levels.items()
    } == {
        2: (4000, 0, 4000, 30, 30),
        1: (2000, 0, 2000, 0, 0),
        0: (1000, 0, 1000, 4250, 4250),
    }
    assert everything["total_planned"] == 4280
    # level 0's partition 1 was emptied by the first run (5850 = 5750 + 100)
    assert _cli_ranges(everything) == [(2, 1, 0, 30, 30), (0, 0, 5750, 10_000, 4250)]
    assert [r["topic"] for r in everything["ranges"]] == [
        drain.level_topic(2),
        drain.level_topic(0),
    ]

    # a backfill of levels 0 and 2: weights 1 and 4 share the budget (1400 / 5600)
    subset = _plan_cli(drain, "--levels", "0,2")
    assert {
        lv: (p["reserved"], p["allocated"], p["planned"]) for lv, p in _levels_of(subset).items()
    } == {2: (5600, 5600, 30), 0: (1400, 1400, 4250)}

    # the human-readable table shows the same plan
    table = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "plan", drain.name, "--levels", "0,2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0, table.stderr
    for fragment in ("reserved", "burst", "allocated", "5,600", "1,400", drain.level_topic(0)):
        assert fragment in table.stdout
    assert drain.level_topic(1) not in table.stdout

    # nothing ran: no new run, no offset moved in Postgres or in Kafka
    assert _db_state(drain) == (runs_before, offsets_before)
    assert _kafka_groups(drain) == groups_before
    assert len(runs_before) == 1


def test_offsets_of_a_topic_the_client_never_knew_are_a_missing_topic_at_once(make_drain, stack):
    """librdkafka answers ListOffsets for a topic its metadata never held with "No leaders
    found", as it does for a leader lost in a broker's crash, which drainer retries with a
    metadata refresh: the refresh that finds no topic ends the wait (it took 15 s, then said
    "No leaders found")."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    from drainer.errors import TopicMissing

    drain = make_drain(levels=1)
    absent = f"{drain.topic}-never"
    with KafkaSession(drain, load_settings()) as kafka:
        kafka.watermarks({0: [0]})  # the session has met the cluster
        try:
            latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
            kafka.list_offsets([({(absent, 0): latest}, IsolationLevel.READ_UNCOMMITTED)])
        except TopicMissing as err:
            assert err.topics == [absent]
        else:
            raise AssertionError("offsets of a topic that does not exist were listed")


def test_a_missing_level_topic_is_one_error_naming_it_and_the_command_that_creates_it(
    make_drain, stack
):
    from drainer.errors import TopicMissing
    from drainer.lifecycle.run import drain_once

    drain = make_drain()
    topic = drain.level_topic(1)
    with KafkaSession(drain, load_settings()) as kafka:
        kafka.admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the brokers' metadata no longer has it
        with KafkaSession(drain, load_settings()) as kafka:
            try:
                kafka.partitions([1])
            except TopicMissing:
                break
        time.sleep(0.2)
    expected = (
        f"topic {topic} of drain '{drain.name}' does not exist: create the drain's topics with "
        f"`drainer topics create {drain.name}`"
    )

    def never(_ctx):  # planning stops the run before anything is read
        raise AssertionError("executed a run over a missing topic")

    try:
        drain_once(drain, never, trigger="test", settings=load_settings())
    except TopicMissing as err:
        assert str(err) == expected
        assert (err.code, err.retriable, err.topics) == ("UNKNOWN_TOPIC_OR_PART", False, [topic])
    else:
        raise AssertionError("a run over a missing topic did not fail")
    with get_engine().connect() as conn:
        planned = conn.scalar(text("SELECT count(*) FROM runs WHERE drain = :d"), {"d": drain.name})
    assert planned == 0  # nothing was planned

    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "plan", drain.name],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.strip()] == [f"drainer: {expected}"]

    # the command the message names makes the drain work again
    created = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "topics", "create", drain.name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0 and f"{topic}" in created.stdout
    assert drain_once(drain, never, trigger="test", settings=load_settings()).drained == 0
