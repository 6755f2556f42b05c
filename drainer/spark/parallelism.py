"""How many tasks a piece of Spark work runs in, from what the master says about its cores."""

from __future__ import annotations

import os

from drainer.settings import Settings


def local_cores(master: str) -> int | None:
    """The cores of a `local`, `local[N]` or `local[*]` master; None for any other."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        threads = master[len("local[") : -1].split(",")[0]
        return os.cpu_count() if threads == "*" else int(threads) if threads.isdigit() else None
    return None


def snapshot_partitions(settings: Settings, cores: int | None) -> str:
    """The tasks a run's Delta log replay runs in: the shuffle's, but no more than the cores
    that run them (a snapshot's state, its files with their statistics, is computed in a job
    of this many tasks before a run reads a table, and again in a MERGE: on two cores 8 tasks
    took 0.24-0.28 s, 2 tasks 0.08-0.12 s, issue 48). `drainer maintain` replays long logs
    with the shuffle's (spark_jobs.sinks.delta)."""
    shuffle = int(settings.shuffle_partitions)
    return str(min(shuffle, cores) if cores else shuffle)
