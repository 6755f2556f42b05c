"""The commit transaction of a run (DESIGN §5): publish, advance offsets, record stats.

All of it happens in one Postgres transaction, or none of it does. A run that crashes before
this point left only staged rows keyed by its run id; the resumed run replaces them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from drainer.config import DrainConfig
from drainer.offset_map import advance, decode_offset_map, encode_offset_map
from drainer.sink_tables import publish_staged
from drainer.state import CommitConflict, Lease, StoredRange, StoredRun, check_fence


@dataclass
class LevelOutcome:
    planned: int = 0
    drained: int = 0
    failed: int = 0
    held_back: int = 0
    dead_lettered: int = 0


@dataclass
class CommitResult:
    levels: dict[int, LevelOutcome]
    published_rows: int


def commit_run(
    engine: Engine, lease: Lease, drain: DrainConfig, run: StoredRun, duration_s: float
) -> CommitResult:
    with engine.begin() as conn:
        check_fence(conn, lease)
        status = conn.scalar(
            text("SELECT status FROM runs WHERE id = :r FOR UPDATE"), {"r": run.id}
        )
        if status != "running":
            raise CommitConflict(f"run {run.id} is {status}, not running: not committing it twice")
        published = publish_staged(conn, drain.sink.table, run.id)
        failures = _failures(conn, run.id)
        levels = {level: LevelOutcome() for level in run.levels}
        for rng in run.ranges:
            outcome = levels[rng.level]
            outcome.planned += rng.records
            not_done: set[int] = set()
            for f in failures.get((rng.topic, rng.partition), []):
                if f["held_back"]:
                    outcome.held_back += 1
                    not_done.add(f["offset"])
                    continue
                outcome.failed += 1
                dead_id = _count_attempt(conn, drain, run.id, rng, f)
                if dead_id is None:
                    not_done.add(f["offset"])
                else:
                    outcome.dead_lettered += 1
            outcome.drained += rng.records - len(not_done)
            _advance_partition(conn, drain.name, rng, not_done)
        _store_level_stats(conn, run.id, levels)
        conn.execute(text("DELETE FROM record_failures WHERE run_id = :r"), {"r": run.id})
        conn.execute(
            text(
                "UPDATE runs SET status = 'committed', committed_at = now(), duration_s = :d "
                "WHERE id = :r"
            ),
            {"r": run.id, "d": duration_s},
        )
    return CommitResult(levels, published)


def _failures(conn: Connection, run_id: int) -> dict[tuple[str, int], list[dict]]:
    found: dict[tuple[str, int], list[dict]] = defaultdict(list)
    rows = conn.execute(
        text(
            'SELECT topic, partition, "offset", held_back, key, value, headers, ts, error '
            'FROM record_failures WHERE run_id = :r ORDER BY topic, partition, "offset"'
        ),
        {"r": run_id},
    )
    for row in rows.mappings():
        found[(row["topic"], row["partition"])].append(dict(row))
    return found


def _count_attempt(
    conn: Connection, drain: DrainConfig, run_id: int, rng: StoredRange, failure: dict
) -> int | None:
    """Count one failed attempt; at max_attempts move the record to the dead letters (done)."""
    attempts = conn.scalar(
        text(
            'INSERT INTO record_attempts (drain, topic, partition, "offset", attempts, last_error) '
            'VALUES (:d, :t, :p, :o, 1, :e) ON CONFLICT (drain, topic, partition, "offset") '
            "DO UPDATE SET attempts = record_attempts.attempts + 1, last_error = :e, "
            "updated_at = now() RETURNING attempts"
        ),
        {
            "d": drain.name,
            "t": rng.topic,
            "p": rng.partition,
            "o": failure["offset"],
            "e": failure["error"],
        },
    )
    if attempts < drain.max_attempts:
        return None
    headers = failure["headers"]
    dead_id = conn.scalar(
        text(
            'INSERT INTO dead_letters (drain, run_id, topic, level, partition, "offset", key, value, '
            "headers, ts, error, attempts) VALUES (:d, :r, :t, :l, :p, :o, :k, :v, "
            'CAST(:h AS jsonb), :ts, :e, :a) ON CONFLICT (drain, topic, partition, "offset") '
            "DO UPDATE SET run_id = :r, error = :e, attempts = :a, retried_at = NULL, "
            "created_at = now() RETURNING id"
        ),
        {
            "d": drain.name,
            "r": run_id,
            "t": rng.topic,
            "l": rng.level,
            "p": rng.partition,
            "o": failure["offset"],
            "k": failure["key"],
            "v": failure["value"],
            "h": None if headers is None else json.dumps(headers),
            "ts": failure["ts"],
            "e": failure["error"],
            "a": attempts,
        },
    )
    conn.execute(
        text(
            "DELETE FROM record_attempts WHERE drain = :d AND topic = :t AND partition = :p "
            'AND "offset" = :o'
        ),
        {"d": drain.name, "t": rng.topic, "p": rng.partition, "o": failure["offset"]},
    )
    return dead_id


def _advance_partition(conn: Connection, drain: str, rng: StoredRange, not_done: set[int]) -> None:
    """Write the new committed offset and offset map, only from the values the plan started from."""
    earlier = decode_offset_map(rng.start, rng.start_map)
    if not_done:
        first = min(not_done)
        done = {o for o in range(first + 1, rng.end) if o not in not_done}
        done |= {o for o in earlier if o > first}
        committed, rest = advance(first, done)
    else:
        committed, rest = advance(rng.end, {o for o in earlier if o >= rng.end})
    new_map = encode_offset_map(committed, rest)
    updated = conn.execute(
        text(
            "UPDATE partition_offsets SET committed = :c, offset_map = :m, updated_at = now() "
            "WHERE drain = :d AND topic = :t AND partition = :p "
            "AND committed = :c0 AND offset_map = :m0"
        ),
        {
            "c": committed,
            "m": new_map,
            "d": drain,
            "t": rng.topic,
            "p": rng.partition,
            "c0": rng.start,
            "m0": rng.start_map,
        },
    ).rowcount
    if updated != 1:
        raise CommitConflict(
            f"{rng.topic}[{rng.partition}] no longer starts at offset {rng.start} with the planned "
            "offset map (was it rewound?): the run's results were not published; "
            "run again to plan afresh"
        )


def _store_level_stats(conn: Connection, run_id: int, levels: dict[int, LevelOutcome]) -> None:
    for level, out in levels.items():
        conn.execute(
            text(
                "UPDATE run_levels SET drained = :dr, failed = :f, dead_lettered = :dl, "
                "fill_ratio = CASE WHEN reserved > 0 THEN CAST(:dr AS float) / reserved END "
                "WHERE run_id = :r AND level = :l"
            ),
            {"dr": out.drained, "f": out.failed, "dl": out.dead_lettered, "r": run_id, "l": level},
        )
