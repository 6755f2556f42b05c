"""Fault injection for the sinks' writes: end the process once the Spark job writes (tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from drainer import faults
from drainer.errors import ConfigError


def crash_once(started_writing: Callable[[], bool]) -> None:
    """Watch in a thread; crash at `during_spark` once `started_writing()` says so."""

    def watch() -> None:
        while True:
            if started_writing():
                faults.crash_point("during_spark")
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True, name="drainer-fault").start()


def crash_once_files_appear(folder: Path | None) -> None:
    """Crash once the Spark job writes a table's data files."""
    if folder is None:
        raise ConfigError("the during_spark fault needs a lakehouse table on a local path")
    before = set(folder.rglob("*.parquet"))
    crash_once(lambda: bool(set(folder.rglob("*.parquet")) - before))
