"""Tables printed into a pipe (CI, `| less`, a file) keep their full width (issue 31, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
from drainer.cli.output import print_table
columns = ["level", "reserved", "burst", "planned", "drained", "failed", "dead", "lost", "fill",
           "backlog before", "backlog after", "started at"]
print_table("run 12 of orders", columns, [[str(2), *range(1000, 1010), "2026-11-25T14:03:07Z"]])
"""


def test_a_table_piped_to_a_file_is_not_cut_to_80_columns():
    """Before: headers became `lev…` and times `2026-11-…` when stdout was not a terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
    )
    assert "…" not in done.stdout, done.stdout
    assert "backlog before" in done.stdout and "2026-11-25T14:03:07Z" in done.stdout
    header = next(line for line in done.stdout.splitlines() if "level" in line)
    assert "started at" in header  # one row of headers, not wrapped
