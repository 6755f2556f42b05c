"""Shared by the benchmarks: a fresh drain on the real stack and a backlog produced for it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent / "out"


def fresh_drain(records: int, levels: int = 3, partitions: int = 4, **overrides: Any):
    """A uniquely named drain (topics created) whose budget covers `records`."""
    from drainer import services
    from drainer.config import load_drains
    from drainer.kafka_io import create_topics

    services.up(echo=lambda *_: None)
    OUT.mkdir(exist_ok=True)
    name = f"bench_{uuid.uuid4().hex[:8]}"
    body = {
        "topic": name,
        "group": name,
        "levels": levels,
        "partitions": partitions,
        "budget": max(records, 2**levels),
        "schedule": None,
        "sink": {"table": f"{name}_out"},
        **overrides,
    }
    config = OUT / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"drains": {name: body}}))
    os.environ["DRAINER_CONFIG"] = str(config)
    drain = load_drains(config)[name]
    create_topics(drain)
    return drain


def produce(drain, records: int, keys: int = 1000, value_size: int = 100) -> None:
    """`records` spread over the drain's levels, produced by child processes (the CLI)."""
    per_level = [
        records // drain.levels + (i < records % drain.levels) for i in range(drain.levels)
    ]
    for level, count in enumerate(per_level):
        cmd = [sys.executable, "-m", "drainer.cli", "produce", drain.name, "--level", str(level)]
        cmd += ["--count", str(count), "--keys", str(keys), "--value-size", str(value_size)]
        subprocess.run([*cmd, "--seed", str(level)], check=True, capture_output=True)
