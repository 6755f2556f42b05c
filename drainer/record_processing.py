"""Run a handler over one partition's records with an ordering mode and bounded concurrency.

Pure Python (threads, no Spark), so the ordering guarantees are unit-tested directly; the Spark
job calls `process_records` once per Kafka partition inside its tasks.

Orderings (DESIGN §7):
- `partition`: one record at a time in offset order; a failure holds back the rest.
- `key`: records of one key in offset order, different keys concurrently; a failure holds back
  the later records of that key only.
- `unordered`: everything concurrently; nothing is held back.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from drainer.records import Record

Ordering = Literal["partition", "key", "unordered"]
Handler = Callable[[Record], Any]


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
    except Exception as err:  # the handler's failure is data: it goes to attempts/dead letters
        outcome.error = "".join(traceback.format_exception_only(err)).strip()[:4000]
    return outcome.ok


def _run_chain(handler: Handler, chain: Sequence[Outcome]) -> None:
    """Offset order within a chain; after a failure the rest of the chain waits for next run."""
    for index, outcome in enumerate(chain):
        if not _attempt(handler, outcome):
            for later in chain[index + 1 :]:
                later.held_back = True
            return


def process_records(
    records: Iterable[Record],
    handler: Handler,
    ordering: Ordering = "partition",
    max_concurrency: int = 16,
) -> list[Outcome]:
    """Outcomes in the input (offset) order: ok, failed with error text, or held back."""
    outcomes = [Outcome(record) for record in records]
    offsets = [o.record.offset for o in outcomes]
    if any(b <= a for a, b in zip(offsets, offsets[1:], strict=False)):
        raise ValueError("records of one partition must arrive in increasing offset order")
    if ordering == "partition":
        chains = [outcomes]
    elif ordering == "key":
        chains = _by_key(outcomes)
    elif ordering == "unordered":
        chains = [[o] for o in outcomes]
    else:
        raise ValueError(f"unknown ordering {ordering!r}: use partition, key or unordered")
    if len(chains) <= 1 or max_concurrency == 1:
        for chain in chains:
            _run_chain(handler, chain)
        return outcomes
    _run_concurrently(handler, chains, max_concurrency)
    return outcomes


def _by_key(outcomes: list[Outcome]) -> list[list[Outcome]]:
    chains: dict[bytes | None, list[Outcome]] = {}
    for outcome in outcomes:
        chains.setdefault(outcome.record.key, []).append(outcome)
    return list(chains.values())


def _run_concurrently(handler: Handler, chains: list[list[Outcome]], limit: int) -> None:
    """A fixed pool of workers pulls whole chains, so at most `limit` handlers run at once."""
    lock = threading.Lock()
    pending = iter(chains)

    def worker() -> None:
        while True:
            with lock:
                chain = next(pending, None)
            if chain is None:
                return
            _run_chain(handler, chain)

    workers = min(limit, len(chains))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="drainer-handler") as pool:
        futures = [pool.submit(worker) for _ in range(workers)]
        for future in futures:
            future.result()
