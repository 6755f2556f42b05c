"""CPU seconds a run cost, by process: the `drainer run` client and the Connect server it used.

On a shared machine a before/after gap in wall time may be the neighbours' load; the CPU each
side's processes spent on the same run is far less so (it still moves with JIT warm-up and the
caches). A gap in wall time with none in CPU is waiting (round trips, locks, a busy machine), not
more work. The server's count holds all its threads (tasks, GC, JIT) and whatever else the
server ran meanwhile: give each side a server of its own.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def children_cpu() -> float:
    """User + system seconds of this process's children that ended (and were waited for)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def process_cpu(pid: int | None) -> float | None:
    """User + system seconds process `pid` has used so far; None when it cannot be read."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the fields after the command's closing parenthesis: utime and stime are the 12th and 13th
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(pid_file: Path) -> int | None:
    """The pid in a server's pid file (`ConnectPaths.pid_file`), or None (none started here)."""
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def spent(before: float | None, after: float | None) -> float | None:
    """`after - before`, None when either is unknown."""
    return None if before is None or after is None else round(after - before, 3)
