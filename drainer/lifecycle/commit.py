"""The commit transaction of a run: publish, advance offsets, record stats (docs/design.md).

All of it happens in one Postgres transaction, or none of it does. A run that crashes before
this point left only staged rows keyed by its run id; the resumed run replaces them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import CommitConflict
from drainer.lifecycle.results import ExecutionResult
from drainer.sinks import Sink, SinkCommit
from drainer.store import dead_letters, lost_offsets, offsets, runs, throughput, topics
from drainer.store.leases import Lease, check_fence
from drainer.store.retries import RetryOutcome, finish_retries
from drainer.store.runs import StoredRange, StoredRun


@dataclass
class LevelOutcome:
    planned: int = 0
    drained: int = 0
    failed: int = 0
    held_back: int = 0
    dead_lettered: int = 0
    lost_to_retention: int = 0


@dataclass
class CommitResult:
    levels: dict[int, LevelOutcome]
    published_rows: int
    # a run of retried dead letters: what became of them (None: an ordinary run)
    retries: RetryOutcome | None = None


def commit_run(
    engine: Engine,
    lease: Lease,
    drain: DrainConfig,
    sink: Sink[Any],
    run: StoredRun,
    duration_s: float,
    executed: ExecutionResult,
) -> CommitResult:
    """Commit the run the executor carried out: the sink publishes inside this transaction
    (or, having committed before it, has its table commit recorded here).

    `executed.read` is how many records each range held when read (None: all);
    `executed.read_bytes` the key+value+header bytes read per range (None: not measured), kept
    for the record sizes and byte rates of later plans (`drainer.store.throughput`).

    Offsets are not records (transaction markers, aborted records, retention), so `drained`
    counts records read, while the committed offset still moves to each range's end.
    """
    with engine.begin() as conn:
        check_fence(conn, lease)
        status = runs.lock_status(conn, run.id)
        if status != "running":
            raise CommitConflict(f"run {run.id} is {status}, not running: not committing it twice")
        present, read_bytes = executed.read, executed.read_bytes
        published = sink.publish(conn, run.id, executed.table_commit)
        failures = dead_letters.run_failures(conn, run.id, executed.failures_attempt)
        topic_ids = topics.topic_ids(conn, drain.name)  # recorded when the plan was made
        dead = _dead_letter_rule(drain, executed.table_commit)
        levels = {level: LevelOutcome() for level in run.levels}
        lost_in_plan = _skip_retention_losses(conn, drain.name, run, levels)
        measured = []
        for rng in run.ranges:
            outcome = levels[rng.level]
            outcome.planned += rng.records
            lost = lost_in_plan.get((rng.topic, rng.partition), 0)
            outcome.lost_to_retention += lost
            read = (
                rng.records - lost
                if present is None
                else present.get((rng.topic, rng.partition), 0)
            )
            key = (rng.topic, rng.partition)
            size = None if read_bytes is None else read_bytes.get(key, 0)
            measured.append((rng.topic, rng.level, rng.partition, read, size))
            not_done: set[int] = set()
            for f in failures.get((rng.topic, rng.partition), []):
                if f["held_back"]:
                    outcome.held_back += 1
                    not_done.add(f["offset"])
                    continue
                outcome.failed += 1
                if _count_attempt(conn, drain, dead, run.id, rng, topic_ids.get(rng.topic, ""), f):
                    outcome.dead_lettered += 1
                else:
                    not_done.add(f["offset"])
            outcome.drained += read - len(not_done)
            _advance_partition(conn, drain.name, rng, not_done)
        for level, out in levels.items():
            runs.store_level_outcome(
                conn,
                run.id,
                level,
                out.drained,
                out.failed,
                out.dead_lettered,
                out.lost_to_retention,
            )
        throughput.store_read(conn, run.id, measured)
        # its plan has no ranges: every failure staged is one of its retried dead letters
        retried = finish_retries(conn, run.id, failures, redact) if run.retries else None
        dead_letters.clear_failures(conn, run.id)
        if executed.table_commit:  # a sink's table commit, made before this transaction
            runs.store_table_commit(conn, run.id, executed.table_commit.as_dict())
        runs.mark_committed(conn, run.id, duration_s, published)
    return CommitResult(levels, published, retried)


def _skip_retention_losses(
    conn: Connection, drain: str, run: StoredRun, levels: dict[int, LevelOutcome]
) -> dict[tuple[str, int], int]:
    """Apply the run's retention losses; returns the offsets lost inside each planned range.

    A loss below the committed offset moves the stored offset and map to where the plan
    started, by compare-and-set from what was stored when planning (drainer.lifecycle.planning).
    """
    in_plan: dict[tuple[str, int], int] = {}
    for loss in lost_offsets.run_losses(conn, run.id):
        if loss.kind == "plan":
            in_plan[(loss.topic, loss.partition)] = loss.records
            continue
        levels[loss.level].lost_to_retention += loss.records
        # a 'committed' loss carries the progress it moves from and to
        assert loss.moved_from is not None and loss.moved_to is not None
        if not offsets.compare_and_set(
            conn, drain, loss.topic, loss.partition, loss.moved_from, loss.moved_to
        ):
            raise CommitConflict(
                f"{loss.topic}[{loss.partition}] no longer starts at offset "
                f"{loss.moved_from.committed} "
                "(was it rewound?): the run's results were not published; run again to plan afresh"
            )
    return in_plan


@dataclass(frozen=True)
class DeadLetterRule:
    max_attempts: int
    published: bool  # the sink's own commit carried them to the DLQ topic


def _dead_letter_rule(drain: DrainConfig, table_commit: SinkCommit | None) -> DeadLetterRule:
    """A sink that produced the dead letters in its own transaction decided them with the
    `max_attempts` it recorded: the same decision here, even if the setting changed before a
    resumed run commits (the DLQ topic holds them already)."""
    if table_commit is not None and table_commit.dlq_max_attempts is not None:
        return DeadLetterRule(table_commit.dlq_max_attempts, published=True)
    return DeadLetterRule(drain.max_attempts, published=False)


def _count_attempt(
    conn: Connection,
    drain: DrainConfig,
    dead: DeadLetterRule,
    run_id: int,
    rng: StoredRange,
    topic_id: str,
    failure: dict[str, Any],
) -> bool:
    """Count one failed attempt; at max_attempts move the record to the dead letters (done)."""
    failure = {**failure, "error": redact(failure["error"] or "")}  # stored from here on
    attempts = dead_letters.count_attempt(
        conn, drain.name, rng.topic, topic_id, rng.partition, failure["offset"], failure["error"]
    )
    if not dead_letters.is_dead_letter(attempts, dead.max_attempts, failure["error"]):
        return False
    headers = failure["headers"]
    dead_letters.insert_dead_letter(
        conn,
        drain.name,
        run_id,
        rng.level,
        failure,
        json.dumps(headers or []),  # already the stored [key, base64] form
        attempts,
        rng.topic,
        topic_id,
        rng.partition,
        published=dead.published,
    )
    return True


def _advance_partition(conn: Connection, drain: str, rng: StoredRange, not_done: set[int]) -> None:
    """Write the new committed offset and offset map, only from the values the plan started from."""
    start = rng.start_progress()
    new = start.after_read(rng.end, not_done)
    if not offsets.compare_and_set(conn, drain, rng.topic, rng.partition, start, new):
        raise CommitConflict(
            f"{rng.topic}[{rng.partition}] no longer starts at offset {rng.start} with the planned "
            "offset map (was it rewound?): the run's results were not published; "
            "run again to plan afresh"
        )
