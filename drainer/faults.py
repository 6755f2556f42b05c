"""Fault injection for the crash tests: end the process abruptly at a named point of a run.

Set DRAINER_FAULT to one of POINTS; the run exits with status 86 there, as if killed, so the
tests can prove that the next run finishes the work exactly once.

The point is the run's `Settings.fault`, armed by the run's entry (`armed_for`) from the
settings it was handed: a crash point compares two strings, it reads no environment and no
secret file. The arming is per process, not per call: a fault ends the whole process, and the
crash points sit in code (the Kafka sink's produce loop, a fold's transaction) that has no
settings of its own to ask. Every crash point runs in the driver's process; one inside a Spark
task would be handed the point with the task's plain values.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

POINTS = ("after_plan", "during_spark", "after_staging", "after_commit")
# inside a fold of sink partitions (drainer.store.sink_folds), before its transaction commits
FOLD_POINTS = ("fold_copied", "fold_swapped")
# a lakehouse sink's run has no Postgres stage; after_table_commit: its table holds the run,
# Postgres does not yet
TABLE_POINTS = ("after_plan", "during_spark", "after_table_commit", "after_commit")
# a routed sink's run (drainer.sinks.routed): one of its tables committed, the next not yet
BETWEEN_TABLES = "between_tables"
# the offsets are mirrored to Kafka; the after-commit upkeep and report have not run
MIRROR_POINT = "after_mirror"
# a Kafka sink's run: mid_produce, inside its open Kafka transaction; after_table_commit: the
# transaction is committed, Postgres is not
KAFKA_POINTS = ("after_plan", "during_spark", "mid_produce", "after_table_commit", "after_commit")
# `pause_after_produce`: the process stops itself (SIGSTOP) with its transaction produced but not
# committed, as a paused zombie would
PAUSE_POINTS = ("pause_after_produce",)
EXIT_CODE = 86


_armed: list[str | None] = [None]
"""The crash point of the run in progress in this process (its `Settings.fault`), or None."""


@contextlib.contextmanager
def armed_for(fault: str | None) -> Iterator[None]:
    """Arm the crash points with a run's `Settings.fault` while its block runs, then put back
    what was armed before."""
    before = _armed[0]
    _armed[0] = fault
    try:
        yield
    finally:
        _armed[0] = before


def armed(point: str) -> bool:
    """True when the run in progress was handed `point` as its fault."""
    return _armed[0] == point


def crash_point(point: str) -> None:
    if armed(point):
        sys.stderr.write(f"drainer: injected fault at {point}: exiting now\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)


def pause_point(point: str) -> None:
    """Stop this process (SIGSTOP) at `pause_<point>`; it goes on when sent SIGCONT."""
    if armed(f"pause_{point}"):
        import signal

        sys.stderr.write(f"drainer: injected pause at {point}: stopping now\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
