"""Run a handler over one partition's records with an ordering mode and bounded concurrency.

Pure Python (threads, no Spark), so the ordering guarantees are unit-tested directly; the Spark
job calls `process_in_chunks` once per Kafka partition inside its tasks, and stages each chunk's
outcomes as it completes, so a task holds one chunk of outcomes, not its whole range.

Orderings:
- `partition`: one record at a time in offset order; a failure holds back the rest.
- `key`: records of one key in offset order, different keys concurrently; a failure holds back
  the later records of that key only.
- `unordered`: everything concurrently; nothing is held back.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from drainer.processing.records import Record

Ordering = Literal["partition", "key", "unordered"]
Handler = Callable[[Record], Any]
CHUNK_RECORDS = 10_000  # records whose outcomes a task holds at a time (process_in_chunks)


@dataclass
class HeldBack:
    """What holds later records back, carried from one chunk of a partition to the next."""

    partition_failed: bool = False
    failed_keys: set[bytes | None] = field(default_factory=set)


@dataclass
class Outcome:
    record: Record
    ok: bool = False
    held_back: bool = False
    error: str | None = None
    rows: list[Any] = field(default_factory=list)


def _as_rows(result: Any) -> list[Any]:
    if result is None:
        return []
    if isinstance(result, list):
        return result
    return [result]


def _attempt(handler: Handler, outcome: Outcome) -> bool:
    try:
        outcome.rows = _as_rows(handler(outcome.record))
        outcome.ok = True
    # the handler's failure is data (attempts, dead letters), even sys.exit(): never the task's
    except BaseException as err:
        outcome.error = "".join(traceback.format_exception_only(err)).strip()[:4000]
    return outcome.ok


def process_records(
    records: Iterable[Record],
    handler: Handler,
    ordering: Ordering = "partition",
    max_concurrency: int = 16,
    held: HeldBack | None = None,
) -> list[Outcome]:
    """Outcomes in the input (offset) order: ok, failed with error text, or held back.

    Records are handed to the handler as they arrive (the input may be a stream, such as a
    Spark partition being read), so the handler's waiting overlaps the reading. Input must be
    in increasing offset order: records of one Kafka partition. `held` carries failures in from
    earlier records of the same partition and out to later ones (see `process_in_chunks`).
    """
    if ordering not in ("partition", "key", "unordered"):
        raise ValueError(f"unknown ordering {ordering!r}: use partition, key or unordered")
    held = held if held is not None else HeldBack()
    if ordering == "partition" or max_concurrency == 1:
        return _serial(records, handler, ordering, held)
    return _Concurrent(handler, ordering, max_concurrency, held).run(records)


def process_in_chunks(
    records: Iterable[Record],
    handler: Handler,
    ordering: Ordering = "partition",
    max_concurrency: int = 16,
    chunk_records: int = CHUNK_RECORDS,
) -> Iterator[list[Outcome]]:
    """`process_records` over one partition's records, `chunk_records` at a time.

    Yields each chunk's outcomes, in offset order, once every record of the chunk is done; the
    caller stages them before asking for the next. A failure holds back later records across
    chunk boundaries exactly as within one call (its partition, or its key), so the outcomes
    are those of a single `process_records` over the whole input; memory is one chunk's.
    """
    held = HeldBack()
    chunk: list[Record] = []
    for record in _in_offset_order(records):
        chunk.append(record)
        if len(chunk) >= chunk_records:
            yield process_records(chunk, handler, ordering, max_concurrency, held)
            chunk = []
    if chunk:
        yield process_records(chunk, handler, ordering, max_concurrency, held)


def _in_offset_order(records: Iterable[Record]) -> Iterator[Record]:
    previous = None
    for record in records:
        if previous is not None and record.offset <= previous:
            raise ValueError(
                "records of one partition must arrive in increasing offset order: "
                f"offset {record.offset} came after {previous}"
            )
        previous = record.offset
        yield record


def _serial(
    records: Iterable[Record], handler: Handler, ordering: Ordering, held: HeldBack
) -> list[Outcome]:
    """One at a time, in offset order; a failure holds back its partition or its key."""
    outcomes: list[Outcome] = []
    for record in _in_offset_order(records):
        outcome = Outcome(record)
        outcomes.append(outcome)
        if held.partition_failed or (ordering == "key" and record.key in held.failed_keys):
            outcome.held_back = True
        elif not _attempt(handler, outcome):
            held.partition_failed = ordering == "partition"
            if ordering == "key":
                held.failed_keys.add(record.key)
    return outcomes


YIELD_EVERY = 16  # records read between two yields of the reading thread (see _Concurrent.run)


class _Concurrent:
    """Key or unordered ordering on at most `limit` worker threads, fed while reading.

    A key is a chain: its records run one after another, in offset order, in the worker that
    holds the chain; the next record of a busy key queues behind it. After a failure, the
    queued and all later records of that key are held back. Unordered records are chains of
    one. Workers start as work arrives, up to the limit.
    """

    def __init__(self, handler: Handler, ordering: Ordering, limit: int, held: HeldBack) -> None:
        self.handler = handler
        self.keyed = ordering == "key"
        self.limit = limit
        self.lock = threading.Lock()
        self.ready: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()  # None: stop
        self.busy: dict[bytes | None, deque[Outcome]] = {}  # key -> its queued records
        self.failed = held.failed_keys  # shared with the next chunk of the partition
        self.workers: list[threading.Thread] = []

    def run(self, records: Iterable[Record]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        try:
            for record in _in_offset_order(records):
                outcome = Outcome(record)
                outcomes.append(outcome)
                if len(outcomes) % YIELD_EVERY == 0:
                    time.sleep(0)  # let handlers that woke up run: reading must not starve them
                if not self.keyed:
                    self._dispatch(outcome)
                    continue
                with self.lock:
                    if record.key in self.failed:
                        outcome.held_back = True
                        continue
                    queued = self.busy.get(record.key)
                    if queued is not None:
                        queued.append(outcome)
                        continue
                    self.busy[record.key] = deque()
                self._dispatch(outcome)
        finally:
            for _ in self.workers:
                self.ready.put(None)
            for worker in self.workers:
                worker.join()
        return outcomes

    def _dispatch(self, outcome: Outcome) -> None:
        self.ready.put(outcome)
        # work is waiting: add a worker, up to the limit (only this thread starts them)
        if len(self.workers) < self.limit and self.ready.qsize():
            worker = threading.Thread(
                target=self._work, name=f"drainer-handler-{len(self.workers)}", daemon=True
            )
            self.workers.append(worker)
            worker.start()

    def _work(self) -> None:
        while True:
            outcome = self.ready.get()
            if outcome is None:
                return
            while outcome is not None:
                ok = _attempt(self.handler, outcome)
                outcome = self._next_of_chain(outcome.record.key, ok) if self.keyed else None

    def _next_of_chain(self, key: bytes | None, ok: bool) -> Outcome | None:
        with self.lock:
            queued = self.busy[key]
            if ok and queued:
                return queued.popleft()
            del self.busy[key]
            if not ok:
                self.failed.add(key)
                for later in queued:
                    later.held_back = True
            return None
