"""The benchmarks' CPU probe (benchmarks/cpu_probe.py): a process's CPU seconds as the kernel
counts them, and None, never a guess, when a process or pid file is not there."""

from __future__ import annotations

import os
import resource

from benchmarks.cpu_probe import process_cpu, server_pid, spent


def _own_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def test_a_process_cpu_is_the_kernels_count():
    start = _own_cpu()
    while _own_cpu() - start < 0.3:  # enough CPU that a misread field cannot pass by chance
        sum(range(10_000))
    read = process_cpu(os.getpid())
    assert read is not None
    # /proc counts in clock ticks (10 ms), getrusage finer: the same counter either way
    assert abs(read - _own_cpu()) < 0.05


def test_an_unknown_process_or_pid_file_gives_none(tmp_path):
    assert process_cpu(None) is None
    assert process_cpu(2**22 + 12345) is None  # above Linux's largest pid
    assert server_pid(tmp_path / "server.pid") is None
    (tmp_path / "server.pid").write_text("not a pid\n")
    assert server_pid(tmp_path / "server.pid") is None
    (tmp_path / "server.pid").write_text("4242\n")
    assert server_pid(tmp_path / "server.pid") == 4242


def test_spent_is_unknown_when_either_end_is():
    assert spent(1.0, 3.5) == 2.5
    assert spent(None, 3.5) is None
    assert spent(1.0, None) is None
