"""A Delta table's latest commits read from its log folder (drainer.sinks.delta_log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.sinks.delta_log import latest_commits


def _commit(log: Path, version: int, meta: str | None, first: bool = True, spaced: bool = False):
    info = {"commitInfo": {"operation": "WRITE", "operationMetrics": {"numOutputRows": "3"}}}
    if meta is not None:
        info["commitInfo"]["userMetadata"] = meta
    add = {"add": {"path": f"part-{version}.parquet", "size": 1}}
    actions = [info, add] if first else [add, info]
    text = "\n".join(
        json.dumps(a, separators=(", ", ": ") if spaced else (",", ":")) for a in actions
    )
    (log / f"{version:020d}.json").write_text(text + "\n")


def test_the_latest_commits_come_newest_first_with_their_metrics_and_marker(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    for version in range(4):
        _commit(log, version, f"m{version}", first=version % 2 == 0, spaced=version == 3)
    # not commits: a checkpoint, a checksum, a compacted log, a commit still being written
    for name in (
        f"{2:020d}.checkpoint.parquet",
        f".{3:020d}.json.crc",
        f"{0:020d}.{3:020d}.compacted.json",
        f".{4:020d}.json.0b9c.tmp",
    ):
        (log / name).write_text("{}")
    found = list(latest_commits(tmp_path, 3))
    assert [c.version for c in found] == [3, 2, 1]
    assert [c.user_metadata for c in found] == ["m3", "m2", "m1"]
    assert found[0].metrics == {"numOutputRows": "3"}


def test_a_folder_without_a_log_has_no_commits(tmp_path):
    assert list(latest_commits(tmp_path, 10)) == []
    assert list(latest_commits(tmp_path / "missing", 10)) == []


def test_a_commit_without_user_metadata_has_none(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    _commit(log, 0, None)
    assert [c.user_metadata for c in latest_commits(tmp_path, 1)] == [None]


@settings(max_examples=40, deadline=None)
@given(versions=st.sets(st.integers(0, 10**6), min_size=1, max_size=12), latest=st.integers(1, 15))
def test_the_latest_are_the_highest_versions(tmp_path_factory, versions, latest):
    table = tmp_path_factory.mktemp("table")
    log = table / "_delta_log"
    log.mkdir()
    for version in versions:
        _commit(log, version, str(version))
    found = list(latest_commits(table, latest))
    assert [c.version for c in found] == sorted(versions, reverse=True)[:latest]
    assert all(c.user_metadata == str(c.version) for c in found)


def test_commits_are_read_one_at_a_time_newest_first(tmp_path):
    """A run finds its commit among the newest: older files are not opened before they are
    asked for (a MERGE's commit file can be megabytes)."""
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / f"{0:020d}.json").mkdir()  # opening it fails: it must not be opened
    _commit(log, 1, "mine")
    commits = latest_commits(tmp_path, 10)
    assert next(commits).user_metadata == "mine"
    with pytest.raises(OSError):
        next(commits)
