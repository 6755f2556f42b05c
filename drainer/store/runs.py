"""Plans and runs: the stored plan (ranges and per-level numbers) and each run's status.

A plan is written before anything is read, and an uncommitted one is resumed with exactly the
same ranges, so its output is the same and writing it again changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, text

from drainer.offset_map import PartitionProgress
from drainer.store import dead_letters, retries
from drainer.store.leases import Lease, check_fence, set_owner
from drainer.store.offsets import insert_initial_offsets


@dataclass(frozen=True)
class StoredRange:
    topic: str
    level: int
    partition: int
    start: int
    end: int
    start_map: str
    records: int

    def start_progress(self) -> PartitionProgress:
        """The partition's progress the plan started from (its map: offsets the read skips)."""
        return PartitionProgress.from_stored(self.start, self.start_map)

    def readable_from(self, start: int) -> int:
        """The most records a read of [start, end) returns: one per offset, less the offsets
        the plan's map has done (the read skips them)."""
        if start >= self.end:
            return 0
        done = self.start_progress().done_below(self.end)
        return self.end - start - sum(1 for offset in done if offset >= start)


@dataclass(frozen=True)
class StoredRun:
    id: int
    drain: str
    status: str
    levels: list[int]
    budget: int
    mode: str
    attempts: int
    ranges: list[StoredRange]
    # the run's identity in its table commits' markers (None: planned before nonces existed)
    nonce: str | None = None
    planned_at: datetime | None = None
    # dead letters it retries (claimed with the plan; drainer.lifecycle.retries): no ranges
    retries: int = 0


@dataclass(frozen=True)
class PlannedLevel:
    """A level's numbers as a plan stores them (drainer.allocation.LevelPlan, as plain values)."""

    level: int
    reserved: int
    burst: int
    allocated: int
    backlog_before: int
    planned: int


_RUN_COLUMNS = "id, drain, status, levels, budget, mode, attempts, nonce, planned_at"
# a plan in one of these states is the drain's next run (resumed, never replaced); 'committed'
# and 'abandoned' (`drainer plan abandon`) end it
OPEN_STATUSES = "('planned', 'running', 'failed')"


def open_run(conn: Connection, drain: str) -> StoredRun | None:
    """The drain's uncommitted plan, if any: it must be resumed before anything new is planned."""
    row = conn.execute(
        text(f"SELECT {_RUN_COLUMNS} FROM runs WHERE drain = :d AND status IN {OPEN_STATUSES}"),
        {"d": drain},
    ).first()
    return None if row is None else _load_run(conn, row)


def get_run(conn: Connection, run_id: int) -> StoredRun:
    row = conn.execute(text(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = :r"), {"r": run_id}).one()
    return _load_run(conn, row)


def _load_run(conn: Connection, row: Any) -> StoredRun:
    ranges = [
        StoredRange(
            r.topic, r.level, r.partition, r.start_offset, r.end_offset, r.start_map, r.records
        )
        for r in conn.execute(
            text(
                "SELECT topic, level, partition, start_offset, end_offset, start_map, records "
                "FROM run_ranges WHERE run_id = :r ORDER BY level DESC, partition"
            ),
            {"r": row.id},
        )
    ]
    return StoredRun(
        row.id,
        row.drain,
        row.status,
        list(row.levels),
        row.budget,
        row.mode,
        row.attempts,
        ranges,
        row.nonce,
        row.planned_at,
        retries.claimed_count(conn, row.id),
    )


def write_plan(
    conn: Connection,
    lease: Lease,
    drain: str,
    budget: int,
    mode: str,
    levels: list[int],
    trigger: str,
    level_numbers: list[PlannedLevel],
    ranges: list[StoredRange],
    initial_offsets: dict[tuple[str, int], int],
) -> int:
    """Store the plan before anything is read, so a crash after this point resumes it.

    `budget` is the record budget the plan was made with (`run_seconds` derives one).
    `initial_offsets` are the first progress rows of partitions planned for the first time.
    """
    check_fence(conn, lease)
    insert_initial_offsets(conn, drain, initial_offsets)
    run_id = conn.scalar(
        text(
            "INSERT INTO runs (drain, status, levels, budget, mode, trigger, fence) "
            "VALUES (:d, 'planned', :levels, :b, :m, :t, :f) RETURNING id"
        ),
        {"d": drain, "levels": levels, "b": budget, "m": mode, "t": trigger, "f": lease.fence},
    )
    if level_numbers:  # a run of retried dead letters covers no level
        conn.execute(
            text(
                "INSERT INTO run_levels (run_id, level, reserved, burst, allocated, backlog_before, planned) "
                "VALUES (:r, :level, :reserved, :burst, :allocated, :backlog, :planned)"
            ),
            [
                {
                    "r": run_id,
                    "level": n.level,
                    "reserved": n.reserved,
                    "burst": n.burst,
                    "allocated": n.allocated,
                    "backlog": n.backlog_before,
                    "planned": n.planned,
                }
                for n in level_numbers
            ],
        )
    if ranges:
        conn.execute(
            text(
                "INSERT INTO run_ranges (run_id, topic, level, partition, start_offset, end_offset, "
                "start_map, records) VALUES (:r, :t, :l, :p, :s, :e, :m, :n)"
            ),
            [
                {
                    "r": run_id,
                    "t": r.topic,
                    "l": r.level,
                    "p": r.partition,
                    "s": r.start,
                    "e": r.end,
                    "n": r.records,
                    "m": r.start_map,
                }
                for r in ranges
            ],
        )
    set_owner(conn, drain, run_id)
    return int(run_id)


def mark_running(conn: Connection, lease: Lease, run_id: int, dagster_run_id: str | None) -> int:
    check_fence(conn, lease)
    attempts = conn.scalar(
        text(
            "UPDATE runs SET status = 'running', attempts = attempts + 1, started_at = now(), "
            "fence = :f, error = NULL, dagster_run_id = coalesce(:dr, dagster_run_id) "
            "WHERE id = :r RETURNING attempts"
        ),
        {"f": lease.fence, "r": run_id, "dr": dagster_run_id},
    )
    set_owner(conn, lease.drain, run_id)
    return int(attempts)


def mark_failed(engine: Engine, lease: Lease, run_id: int, error: str) -> None:
    """Best effort: the plan stays and is resumed by the next run either way.

    Only while the run still carries this lease's fence: a zombie that was fenced out must not
    mark failed the plan that a newer run has resumed and is executing (its commit would refuse).
    """
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE runs SET status = 'failed', error = :e "
                f"WHERE id = :r AND status IN {OPEN_STATUSES} AND fence = :f"
            ),
            # a long Spark error keeps its end, where the worker's root cause is
            {
                "r": run_id,
                "e": error if len(error) <= 8000 else error[:3000] + "\n…\n" + error[-5000:],
                "f": lease.fence,
            },
        )


def abandon(conn: Connection, lease: Lease, run: StoredRun, who: str, reason: str) -> None:
    """End an open plan without committing anything, and audit who, when, why and its ranges.

    Nothing else moves: offsets stay where the plan started, so the next run plans afresh.
    """
    check_fence(conn, lease)
    row = conn.execute(
        text(
            "UPDATE runs SET status = 'abandoned', committed_at = NULL "
            f"WHERE id = :r AND status IN {OPEN_STATUSES} RETURNING status, attempts, error"
        ),
        {"r": run.id},
    ).first()
    if row is None:
        raise ValueError(f"run {run.id} is no longer open")
    ranges = [
        {
            "topic": r.topic,
            "partition": r.partition,
            "start": r.start,
            "end": r.end,
            "records": r.records,
        }
        for r in run.ranges
    ]
    conn.execute(
        text(
            "INSERT INTO plan_abandons (drain, run_id, status, attempts, last_error, ranges, "
            "requested_by, reason) VALUES (:d, :r, :s, :a, :e, CAST(:g AS jsonb), :who, :why)"
        ),
        {
            "d": run.drain,
            "r": run.id,
            "s": run.status,
            "a": row.attempts,
            "e": row.error,
            "g": json.dumps(ranges),
            "who": who,
            "why": reason,
        },
    )
    dead_letters.clear_failures(conn, run.id)
    retries.cancel_claim(conn, run.id)


def abandons(conn: Connection, drain: str) -> list[dict[str, Any]]:
    """The audit trail of `drainer plan abandon`, newest first."""
    rows = conn.execute(
        text(
            "SELECT id, run_id, status, attempts, last_error, ranges, requested_by, reason, "
            "created_at FROM plan_abandons WHERE drain = :d ORDER BY id DESC"
        ),
        {"d": drain},
    ).mappings()
    return [dict(row) for row in rows]


def lock_status(conn: Connection, run_id: int) -> str | None:
    """The run's status, row-locked for the rest of the commit transaction."""
    status = conn.scalar(text("SELECT status FROM runs WHERE id = :r FOR UPDATE"), {"r": run_id})
    return None if status is None else str(status)


def run_nonce(conn: Connection, run_id: int) -> str:
    """What tells this run from another of the same id (a restored or reset state database):
    its nonce (`runs.nonce`); a run planned before nonces, when its plan was made, to the
    microsecond. Sinks put it in their commit markers."""
    planned = conn.scalar(
        text(
            "SELECT coalesce(nonce, to_char(planned_at AT TIME ZONE 'UTC', "
            "'YYYYMMDD\"T\"HH24MISSUS')) FROM runs WHERE id = :r"
        ),
        {"r": run_id},
    )
    return str(planned)


def mark_committed(conn: Connection, run_id: int, duration_s: float, published_rows: int) -> None:
    conn.execute(
        text(
            "UPDATE runs SET status = 'committed', committed_at = now(), duration_s = :d, "
            "published_rows = :p WHERE id = :r"
        ),
        {"r": run_id, "d": duration_s, "p": published_rows},
    )


def store_level_outcome(
    conn: Connection,
    run_id: int,
    level: int,
    drained: int,
    failed: int,
    dead_lettered: int,
    lost_to_retention: int = 0,
) -> None:
    """A level's results, with its fill ratio (drained / reserved) for the burst history."""
    conn.execute(
        text(
            "UPDATE run_levels SET drained = :dr, failed = :f, dead_lettered = :dl, "
            "lost_to_retention = :lost, "
            "fill_ratio = CASE WHEN reserved > 0 THEN CAST(:dr AS float) / reserved END "
            "WHERE run_id = :r AND level = :l"
        ),
        {
            "dr": drained,
            "f": failed,
            "dl": dead_lettered,
            "lost": lost_to_retention,
            "r": run_id,
            "l": level,
        },
    )


def store_backlog_after(conn: Connection, run_id: int, backlog_by_level: dict[int, int]) -> None:
    for level, backlog in backlog_by_level.items():
        conn.execute(
            text("UPDATE run_levels SET backlog_after = :b WHERE run_id = :r AND level = :l"),
            {"b": backlog, "r": run_id, "l": level},
        )


LEVEL_REPORT_COLUMNS = (
    "level",
    "reserved",
    "burst",
    "allocated",
    "backlog_before",
    "planned",
    "drained",
    "failed",
    "dead_lettered",
    "fill_ratio",
    "backlog_after",
    "lost_to_retention",
    "read_bytes",
)


def level_rows(conn: Connection, run_id: int) -> list[dict[str, Any]]:
    """A run's per-level numbers as stored (missing ones as 0, bytes it did not count None),
    highest level first."""
    kept = (c if c == "read_bytes" else f"coalesce({c}, 0) AS {c}" for c in LEVEL_REPORT_COLUMNS)
    rows = conn.execute(
        text(f"SELECT {', '.join(kept)} FROM run_levels WHERE run_id = :r ORDER BY level DESC"),
        {"r": run_id},
    ).mappings()
    return [dict(row) for row in rows]


def recent_runs(conn: Connection, drain: str, limit: int) -> Sequence[Row[Any]]:
    """The drain's latest runs with their drained totals and fill ratios, newest first; with
    their lakehouse table commit (`table_commit`, a dict or None) and the columns each added
    to the sink table (`columns_added`)."""
    return conn.execute(
        text(
            "SELECT r.id, r.status, r.levels, r.trigger, r.attempts, r.planned_at, r.duration_s, "
            "r.slot_s, coalesce(sum(rl.drained), 0) AS drained, "
            "coalesce(sum(rl.lost_to_retention), 0) AS lost_to_retention, r.error, "
            "r.columns_added, "
            "jsonb_object_agg(rl.level, rl.fill_ratio) FILTER (WHERE rl.level IS NOT NULL) AS fills, "
            "(SELECT to_jsonb(tc) - 'run_id' || coalesce((SELECT jsonb_build_object("
            "'details', d.details) FROM run_commit_details d WHERE d.run_id = r.id), '{}') "
            "FROM run_table_commits tc WHERE tc.run_id = r.id) AS table_commit "
            "FROM (SELECT * FROM runs WHERE drain = :d ORDER BY id DESC LIMIT :n) r "
            "LEFT JOIN run_levels rl ON rl.run_id = r.id "
            "GROUP BY r.id, r.status, r.levels, r.trigger, r.attempts, r.planned_at, "
            "r.duration_s, r.slot_s, r.error, r.columns_added ORDER BY r.id DESC"
        ),
        {"d": drain, "n": limit},
    ).all()


def latest_committed_dead_lettered(conn: Connection, drain: str) -> int:
    """How many records the drain's latest committed run dead-lettered (0 with no run)."""
    row = conn.execute(
        text(
            # the latest committed run first (by index), then its levels: flat in history
            "SELECT r.id, coalesce(sum(rl.dead_lettered), 0) AS dead FROM ("
            "  SELECT id FROM runs WHERE drain = :d AND status = 'committed' "
            "  ORDER BY id DESC LIMIT 1) r "
            "JOIN run_levels rl ON rl.run_id = r.id GROUP BY r.id"
        ),
        {"d": drain},
    ).first()
    return int(row.dead) if row else 0


_COMMIT_FIELDS = ("format", "location", "version", "files_added", "bytes_added", "rows_added")


def note_columns_added(conn: Connection, run_id: int, columns: Sequence[str]) -> None:
    """Add to the columns the run added to its sink table (its audit: status, Dagster
    metadata), in order, each once: noted when the table changes, so an attempt that added
    them and then failed leaves them on record for the attempt that commits."""
    conn.execute(
        text(
            "UPDATE runs SET columns_added = columns_added || ARRAY(SELECT c FROM "
            "unnest(CAST(:c AS text[])) WITH ORDINALITY AS n(c, i) "
            "WHERE c <> ALL(columns_added) ORDER BY i) WHERE id = :r"
        ),
        {"c": list(columns), "r": run_id},
    )


def forget_columns_added(conn: Connection, run_id: int) -> None:
    """The run's noted columns were never added (a sink that adds them with its commit, and a
    plan abandoned without one)."""
    conn.execute(text("UPDATE runs SET columns_added = '{}' WHERE id = :r"), {"r": run_id})


def columns_added(conn: Connection, run_id: int) -> list[str]:
    found = conn.scalar(text("SELECT columns_added FROM runs WHERE id = :r"), {"r": run_id})
    return list(found or [])


def store_table_commit(conn: Connection, run_id: int, commit: dict[str, Any]) -> None:
    """Record the sink commit a run made before Postgres (a table's, a Kafka transaction's),
    inside the run's Postgres commit."""
    conn.execute(
        text(
            "INSERT INTO run_table_commits (run_id, format, location, version, files_added, "
            "bytes_added, rows_added) VALUES (:run_id, :format, :location, :version, "
            ":files_added, :bytes_added, :rows_added) ON CONFLICT (run_id) DO NOTHING"
        ),
        # a sink whose commits add no files (Kafka) has none to record: 0 in the column
        {
            "run_id": run_id,
            "files_added": 0,
            **{k: commit[k] for k in _COMMIT_FIELDS if k in commit},
        },
    )
    if commit.get("details"):  # a Kafka sink's: records per topic, transactional id
        conn.execute(
            text(
                "INSERT INTO run_commit_details (run_id, details) VALUES (:r, :d) "
                "ON CONFLICT (run_id) DO NOTHING"
            ),
            {"r": run_id, "d": json.dumps(commit["details"])},
        )


def record_table_proof(conn: Connection, run_id: int, attempt: int, commit: dict[str, Any]) -> None:
    """The run's table commit, on record the moment it is seen (before the Postgres commit):
    the proof no snapshot expiry or log clean-up can remove. The first one seen stays."""
    conn.execute(
        text(
            "INSERT INTO run_table_proofs (run_id, attempt, commit) "
            "VALUES (:r, :a, CAST(:c AS jsonb)) ON CONFLICT (run_id) DO NOTHING"
        ),
        {"r": run_id, "a": attempt, "c": json.dumps(commit)},
    )


def table_proof(conn: Connection, run_id: int) -> tuple[int, dict[str, Any]] | None:
    """(attempt, commit) of the run's table commit as first seen, or None."""
    row = conn.execute(
        text("SELECT attempt, commit FROM run_table_proofs WHERE run_id = :r"), {"r": run_id}
    ).first()
    return None if row is None else (int(row.attempt), dict(row.commit))


def oldest_open_plan(conn: Connection, drain: str) -> tuple[int, datetime] | None:
    """(run id, planned_at) of the drain's open plan, whose table commit maintenance must keep."""
    row = conn.execute(
        text(
            f"SELECT id, planned_at FROM runs WHERE drain = :d AND status IN {OPEN_STATUSES} "
            "ORDER BY planned_at LIMIT 1"
        ),
        {"d": drain},
    ).first()
    return None if row is None else (int(row.id), row.planned_at)
