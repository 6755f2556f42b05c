"""Shared by the benchmarks: a fresh drain on the real stack and a backlog produced for it."""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from drainer.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the drains the tests make too (tests.support.drains)
    sys.path.insert(0, str(REPO))
OUT = Path(__file__).resolve().parent / "out"
# set to keep a benchmark's topics after it ends (to look at its records, say)
KEEP_TOPICS = os.environ.get("DRAINER_BENCH_KEEP_TOPICS") == "1"


def delete_at_exit(drain: Any = None, topics: list[str] | None = None) -> None:
    """Delete `drain`'s topics (and `topics`) when the benchmark process ends, however it ends
    short of a kill. A benchmark's backlog is of no use afterwards; left behind, the broker
    keeps loading it at every start and listing it in every metadata answer (here, 529
    topics and 6 GB had piled up)."""
    if not KEEP_TOPICS:
        atexit.register(_delete_quietly, drain, topics or [])


def _delete_quietly(drain: Any, topics: list[str]) -> None:
    from drainer.settings import load_settings
    from tests.support.drains import delete_topics

    with contextlib.suppress(Exception):  # the broker may be down by now: nothing to undo
        if drain is not None:
            delete_topics(drain)
        if topics:
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": load_settings().bootstrap_servers})
            for future in admin.delete_topics(topics, operation_timeout=10).values():
                future.result(timeout=15)


def created_drain(config_dir: Path = OUT, prefix: str = "bench", **overrides: Any):
    """`tests.support.drains.create_drain`, its topics deleted when the benchmark ends."""
    from tests.support.drains import create_drain

    drain, path = create_drain(config_dir, prefix, **overrides)
    delete_at_exit(drain)
    return drain, path


def fresh_drain(records: int, levels: int = 3, partitions: int = 4, **overrides: Any):
    """A uniquely named drain (topics created) whose budget covers `records`."""
    from drainer import services
    from drainer.settings import set_config_path

    services.up(load_settings(), echo=lambda *_: None)
    OUT.mkdir(exist_ok=True)
    drain, config = created_drain(
        OUT,
        prefix="bench",
        levels=levels,
        partitions=partitions,
        budget=max(records, 2**levels),
        **overrides,
    )
    set_config_path(config)  # current for the rest of this benchmark process
    # again, now that the drains file is this one: a Connect server started for another file
    # may lack this drain's format jars (a no-op when it has them)
    services.up(load_settings(), echo=lambda *_: None)
    return drain


def produce(drain, records: int, keys: int = 1000, value_size: int = 100) -> None:
    """`records` spread over the drain's levels, produced by child processes (the CLI)."""
    per_level = [
        records // drain.levels + (i < records % drain.levels) for i in range(drain.levels)
    ]
    for level, count in enumerate(per_level):
        cmd = [sys.executable, "-m", "spark_jobs.cli", "produce", drain.name, "--level", str(level)]
        cmd += ["--count", str(count), "--keys", str(keys), "--value-size", str(value_size)]
        subprocess.run([*cmd, "--seed", str(level)], check=True, capture_output=True)


def vm_hwm_kb(pid: int) -> int:
    """Peak resident memory (VmHWM) of process `pid` in kB; 0 when /proc does not say."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
