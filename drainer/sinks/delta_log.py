"""A Delta table's latest commits read from its log folder, without Spark.

A run that just wrote a table on this machine's file system finds its commit here instead of
asking Spark (`DESCRIBE HISTORY`: a command, a Spark job over the commit files and a second
request for the rows, 0.25-0.3 s of every run, issue 48). Delta's protocol makes each version
one file, `_delta_log/<version, 20 digits>.json`, written atomically once its commit wins, one
action per line, the commit's `commitInfo` (operation metrics, `userMetadata`) among them: the
same record `DESCRIBE HISTORY` shows. Only the newest few files are read, newest first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

# a commit's file; checkpoints, checksums, compacted logs and temporary files are not commits
_COMMIT_FILE = re.compile(r"(\d{20})\.json")


class CommitInfo(NamedTuple):
    """One commit as `DESCRIBE HISTORY` shows it: its version, operation metrics (texts, as
    Delta records them) and the writer's `userMetadata`."""

    version: int
    metrics: dict[str, Any]
    user_metadata: str | None


def latest_commits(table: Path, latest: int) -> Iterator[CommitInfo]:
    """The table's `latest` newest commits, newest first; none when the folder has no log."""
    log = table / "_delta_log"
    try:
        names = [m.group(1) for e in log.iterdir() if (m := _COMMIT_FILE.fullmatch(e.name))]
    except (FileNotFoundError, NotADirectoryError):
        return
    for version in sorted((int(n) for n in names), reverse=True)[:latest]:
        info = _commit_info(log / f"{version:020d}.json")
        if info is not None:
            yield CommitInfo(version, info.get("operationMetrics") or {}, info.get("userMetadata"))


def _commit_info(path: Path) -> dict[str, Any] | None:
    """The `commitInfo` action of one commit file (its other lines are not parsed)."""
    with path.open("rb") as lines:
        for line in lines:
            if b'"commitInfo"' in line[:32]:  # one action a line, its name first
                found = json.loads(line).get("commitInfo")
                if isinstance(found, dict):
                    return found
    return None
