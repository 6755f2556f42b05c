"""The tasks Delta replays a run's log in: the shuffle's, at most the cores."""

from __future__ import annotations

import dataclasses
import os

import pytest

from drainer.settings import load_settings
from drainer.spark.parallelism import local_cores, snapshot_partitions


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[16,3]", 16),  # local[N, maxFailures]
        ("local[*]", os.cpu_count()),
        ("spark://host:7077", None),
        ("local[x]", None),
    ],
)
def test_a_local_masters_cores(master, expected):
    assert local_cores(master) == expected


@pytest.mark.parametrize(
    ("shuffle", "cores", "expected"),
    [("8", 2, "2"), ("8", 16, "8"), ("8", None, "8"), ("3", 4, "3"), ("8", 8, "8")],
)
def test_a_runs_log_replay_never_runs_more_tasks_than_cores(shuffle, cores, expected):
    settings = dataclasses.replace(load_settings(), shuffle_partitions=shuffle)
    assert snapshot_partitions(settings, cores) == expected
