"""Pid files and process lifetimes for the daemons we start ourselves.

A pid file alone is not proof: pids are reused, so a pid only counts as ours when the process is
alive, not a zombie, and its command line still contains the marker we started it with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path


def read_pid(pid_file: Path) -> int | None:
    """The pid stored in `pid_file`, or None when the file is missing or garbled."""
    try:
        return int(pid_file.read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def write_pid(pid_file: Path, pid: int) -> None:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{pid}\n")


def is_alive(pid: int, marker: str | None = None) -> bool:
    """True when `pid` runs (not a zombie whose threads have all exited) and, if given, its
    command line contains `marker`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    proc = Path("/proc") / str(pid)
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        # a killed multi-threaded process (a JVM) shows its main thread as a zombie while its
        # other threads still exit, holding its sockets: it is gone once they are
        if state in ("Z", "X") and len(list((proc / "task").iterdir())) <= 1:
            return False
        if marker is not None:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            return marker in cmdline
    except (FileNotFoundError, IndexError):
        return False
    return True


# A child inherits the signals its parent ignores across exec, and a JVM never handles a shutdown
# signal it was started ignoring (it registers its handler and leaves the signal ignored). A
# broker started by a process that ignored SIGTERM (as the test suite's did, after some module)
# then sat out `terminate`'s 30 s and was killed, its logs recovered at the next start. The
# services start through this shim, which puts the shutdown signals back to their defaults.
_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def fresh_scratch(scratch: Path) -> None:
    """Empty the temp folder (`java.io.tmpdir`) of a JVM about to start in place of one that is
    gone: a process killed with -9 leaves its temp files, which in /tmp would pile up for good."""
    shutil.rmtree(scratch, ignore_errors=True)  # what cannot go must not stop the start
    scratch.mkdir(parents=True)


def with_default_signals(cmd: Sequence[str]) -> list[str]:
    """`cmd` run with SIGHUP, SIGINT and SIGTERM at their defaults, whatever this process
    ignores: a service's `stop` then stops it cleanly (same pid: the shim execs `cmd`)."""
    return [sys.executable, "-I", "-S", "-c", _DEFAULT_SIGNALS, *cmd]


def terminate(pid: int, grace_seconds: float = 30.0) -> bool:
    """SIGTERM, wait up to `grace_seconds`, then SIGKILL. True if it had to be killed."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_alive(pid):
            return False
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    for _ in range(50):
        _reap(pid)
        if not is_alive(pid):
            break
        time.sleep(0.1)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the daemon is our own child (same process started it)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def last_lines(first: Path, first_lines: int, then: Path, then_lines: int) -> str:
    """A failed start's logs: the last lines of `first`, then of `then` if it has any."""
    text = f"last lines of {first}:\n{tail(first, first_lines)}"
    more = tail(then, then_lines)
    if more and not more.startswith("("):
        text += f"\n\nlast lines of {then}:\n{more}"
    return text


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file, or a note that there is none yet."""
    try:
        with path.open(errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines)).rstrip()
    except FileNotFoundError:
        return f"({path} does not exist)"


def our_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in `pid_file` if that process still runs and is ours (its command line has
    `marker`); a reused pid of another program is not."""
    pid = read_pid(pid_file)
    return pid if pid is not None and is_alive(pid, marker) else None


def exit_status(
    proc: subprocess.Popen[bytes] | None, pid: int, marker: str
) -> tuple[bool, int | None]:
    """(gone, exit code) of a service process; the code is None while it runs or if unknown.

    Our own child is judged by its exit status: until it has exec'd its program, its command
    line is still ours, without the marker. A service reused from an earlier process (`proc`
    None) is judged by its pid and marker.
    """
    if proc is not None:
        code = proc.poll()
        return code is not None, code
    return not is_alive(pid, marker), None
