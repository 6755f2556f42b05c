"""History retention on the real Postgres: run detail older than `history_days` goes, its totals
stay, and what the open plan, burst decisions and exactly-once need is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from benchmarks.history_fill import fill_history
from drainer.config import DrainConfig
from drainer.lifecycle.upkeep import prune_history
from drainer.store.history import level_history
from drainer.store.lost_offsets import total_lost
from tests.support.stack import get_engine

DRAINER = Path(sys.executable).with_name("drainer")


def _count(sql: str, **params) -> int:
    with get_engine().connect() as conn:
        return conn.scalar(text(sql), params)


def _history(drain: DrainConfig, old: int = 200, recent: int = 20) -> tuple[list[int], list[int]]:
    """`old` runs 40-41 days ago, `recent` runs of the last two hours; returns both id lists."""
    with get_engine().begin() as conn:
        old_ids = fill_history(
            conn, drain.name, drain.topic, drain.levels, old, drain.partitions, age_days=40
        )
        recent_ids = fill_history(
            conn, drain.name, drain.topic, drain.levels, recent, drain.partitions, offsets=False
        )
    return old_ids, recent_ids


def _open_plan(drain: DrainConfig, days_ago: int) -> int:
    """An uncommitted plan, as a crash leaves it, planned long ago."""
    with get_engine().begin() as conn:
        return conn.scalar(
            text(
                "INSERT INTO runs (drain, status, levels, budget, mode, planned_at) VALUES "
                "(:d, 'failed', '{0}', 10, 'dataframe', now() - make_interval(days => :a)) "
                "RETURNING id"
            ),
            {"d": drain.name, "a": days_ago},
        )


def test_old_runs_become_daily_totals_and_what_runs_need_stays(make_drain):
    drain = make_drain(levels=3, partitions=2, history_window=6)
    # a backfill of level 2 only, long ago: level 2's burst window must keep reaching it
    old, recent = _history(drain)
    with get_engine().begin() as conn:
        conn.execute(
            text("UPDATE runs SET levels = '{0,1}' WHERE drain = :d AND id > :first"),
            {"d": drain.name, "first": old[3]},
        )
        conn.execute(
            text(
                "DELETE FROM run_levels WHERE level = 2 AND run_id IN "
                "(SELECT id FROM runs WHERE drain = :d AND id > :first)"
            ),
            {"d": drain.name, "first": old[3]},
        )
        window_before = level_history(conn, drain.name, [0, 1, 2], drain.history_window)
        drained_before = conn.scalar(
            text(
                "SELECT sum(drained) FROM run_levels rl JOIN runs r ON r.id = rl.run_id "
                "WHERE r.drain = :d"
            ),
            {"d": drain.name},
        )
        # a record still failing: its attempt count is above the committed offset
        conn.execute(
            text(
                'INSERT INTO record_attempts (drain, topic, partition, "offset", attempts, '
                "updated_at) VALUES (:d, :t, 0, 10000000000, 2, now() - interval '60 days')"
            ),
            {"d": drain.name, "t": drain.level_topic(0)},
        )
        lost_before = total_lost(conn, drain.name)
    assert lost_before[0] > 0
    open_plan = _open_plan(drain, days_ago=50)
    dead_before = _count("SELECT count(*) FROM dead_letters WHERE drain = :d", d=drain.name)
    with get_engine().begin() as conn:  # published, but `dlq retry` asked for it: it stays
        waiting = conn.scalar(
            text(
                "UPDATE dead_letters SET retry_requested_at = now() WHERE id = (SELECT min(id) "
                "FROM dead_letters WHERE drain = :d AND dlq_published_at IS NOT NULL "
                "AND retried_at IS NULL AND created_at < now() - interval '30 days') RETURNING id"
            ),
            {"d": drain.name},
        )
    assert waiting is not None
    handled_old = _count(
        "SELECT count(*) FROM dead_letters WHERE drain = :d AND dlq_published_at IS NOT NULL "
        "AND created_at < now() - interval '30 days' AND id <> :w",
        d=drain.name,
        w=waiting,
    )

    report = prune_history(get_engine(), drain)

    # the oldest 4 runs cover level 2: its burst window (6 runs) keeps them, and nothing else old
    assert report.runs == len(old) - 4
    kept = set(
        get_engine()
        .connect()
        .execute(text("SELECT id FROM runs WHERE drain = :d"), {"d": drain.name})
        .scalars()
    )
    assert kept == set(old[:4]) | set(recent) | {open_plan}
    with get_engine().connect() as conn:
        assert level_history(conn, drain.name, [0, 1, 2], drain.history_window) == window_before
        # totals: every pruned run once, per day and level; plus what is still detailed
        totals = conn.execute(
            text(
                "SELECT sum(runs) AS runs, sum(drained) AS drained FROM run_totals WHERE drain = :d"
            ),
            {"d": drain.name},
        ).one()
        detailed = conn.scalar(
            text(
                "SELECT sum(drained) FROM run_levels rl JOIN runs r ON r.id = rl.run_id "
                "WHERE r.drain = :d"
            ),
            {"d": drain.name},
        )
    assert totals.drained + detailed == drained_before
    with get_engine().connect() as conn:  # `drainer status` counts pruned runs' losses too
        assert total_lost(conn, drain.name) == lost_before
    assert totals.runs == (len(old) - 4) * 2 + 0  # levels 0 and 1 of each pruned run
    # the pruned runs' detail went with them
    assert _count("SELECT count(*) FROM run_ranges WHERE run_id = ANY(:ids)", ids=old[4:]) == 0
    assert (
        _count("SELECT count(*) FROM retention_losses WHERE run_id = ANY(:ids)", ids=old[4:]) == 0
    )
    assert report.dead_letters == handled_old
    assert _count("SELECT count(*) FROM dead_letters WHERE id = :w", w=waiting) == 1
    assert (
        _count("SELECT count(*) FROM dead_letters WHERE drain = :d", d=drain.name)
        == dead_before - handled_old
    )
    assert _count(  # nobody handled these: they stay whatever their age
        "SELECT count(*) FROM dead_letters WHERE drain = :d AND dlq_published_at IS NULL "
        "AND retried_at IS NULL AND run_id = ANY(:ids)",
        d=drain.name,
        ids=old,
    ) == len([i for i in old if i % 10 == 0 and i % 20 != 0])
    assert (
        _count(
            "SELECT count(*) FROM record_attempts WHERE drain = :d AND updated_at < now() - "
            "interval '30 days'",
            d=drain.name,
        )
        == 1
    )  # only the record still failing

    again = prune_history(get_engine(), drain)
    assert (again.runs, again.dead_letters, again.attempts) == (0, 0, 0)


def test_upkeep_after_a_commit_prunes_at_most_once_an_hour(make_drain):
    drain = make_drain(levels=1, partitions=1, history_window=2, maxout_threshold=1)
    with get_engine().begin() as conn:
        fill_history(conn, drain.name, drain.topic, 1, 50, 1, age_days=31)
    assert prune_history(get_engine(), drain, hourly=True).runs == 48
    with get_engine().begin() as conn:
        fill_history(conn, drain.name, drain.topic, 1, 50, 1, age_days=32, offsets=False)
    assert prune_history(get_engine(), drain, hourly=True).runs == 0  # pruned this hour
    with get_engine().begin() as conn:
        conn.execute(
            text(
                "UPDATE drains SET history_pruned_at = now() - interval '61 minutes' "
                "WHERE name = :d"
            ),
            {"d": drain.name},
        )
    assert prune_history(get_engine(), drain, hourly=True).runs == 50


def test_drainer_maintain_prunes_on_demand(make_drain):
    drain = make_drain(levels=1, partitions=1, history_window=3, maxout_threshold=1, history_days=7)
    with get_engine().begin() as conn:
        fill_history(conn, drain.name, drain.topic, 1, 30, 1, age_days=8)
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_FAULT"}
    done = subprocess.run(
        [str(DRAINER), "maintain", drain.name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "runs pruned to daily totals" in done.stdout and "27" in done.stdout
    assert _count("SELECT count(*) FROM runs WHERE drain = :d", d=drain.name) == 3
    assert _count("SELECT sum(runs) FROM run_totals WHERE drain = :d", d=drain.name) == 27
