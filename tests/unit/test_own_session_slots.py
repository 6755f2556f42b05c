"""The slots of kept sessions (spark_jobs.own_session): one holder each, and how the last lease
ended, kept in the slot's lock file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from spark_jobs.own_session import SLOTS, _slot
from spark_jobs.session import MadeAt


def made(tmp_path: Path) -> MadeAt:
    return MadeAt("sc://localhost:1/;token=t", tmp_path / "spark-sessions", "sc://localhost:1")


def test_a_slot_is_held_by_one_lease_at_a_time(tmp_path):
    where = made(tmp_path)
    with _slot(where, "merge") as first, _slot(where, "merge") as second:
        assert first is not None and second is not None
        assert first.key != second.key  # the second lease took the next slot
    with _slot(where, "merge") as again:
        assert again is not None and again.key == first.key  # the first is free again


def test_other_work_has_slots_of_its_own(tmp_path):
    where = made(tmp_path)
    with _slot(where, "merge") as merge, _slot(where, "maintain") as maintain:
        assert merge is not None and maintain is not None
        assert merge.key.endswith(" 0") and maintain.key.endswith(" 0")
        assert merge.key != maintain.key


def test_no_slot_when_all_are_held(tmp_path):
    where = made(tmp_path)
    with _all_held(where, SLOTS), _slot(where, "merge") as none:
        assert none is None


def test_a_lease_that_returned_leaves_its_slot_clean(tmp_path):
    where = made(tmp_path)
    with _slot(where, "merge") as first:
        assert first is not None and first.clean  # never leased before
        first.done()
    with _slot(where, "merge") as second:
        assert second is not None and second.clean


def test_a_lease_that_did_not_return_leaves_its_slot_unclean(tmp_path):
    """A lease that raised (or was killed) may have left an operation running in the session:
    the next lease must not change that session's settings."""
    where = made(tmp_path)
    with _slot(where, "merge") as first:
        assert first is not None  # no done(): the work raised
    with _slot(where, "merge") as second:
        assert second is not None and not second.clean
        second.done()
    with _slot(where, "merge") as third:
        assert third is not None and third.clean


def test_a_killed_holder_frees_its_slot_unclean(tmp_path):
    """kill -9 of the process holding a slot: the lock goes with it, the slot stays unclean."""
    where = made(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from spark_jobs.own_session import _slot\n"
            "from spark_jobs.session import MadeAt\n"
            f"where = MadeAt('sc://x', Path({str(where.directory)!r}), 'sc://x')\n"
            "with _slot(where, 'merge') as s:\n"
            "    print(s.key, flush=True)\n"
            "    time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        held = holder.stdout.readline().strip() if holder.stdout else ""
        assert held.endswith(" 0")
        with _slot(where, "merge") as meanwhile:  # held by the other process: the next slot
            assert meanwhile is not None and meanwhile.key.endswith(" 1")
            meanwhile.done()
    finally:
        holder.kill()
        holder.wait()
    with _slot(where, "merge") as after:
        assert after is not None and after.key == held and not after.clean


def test_slots_unused_for_a_week_are_removed(tmp_path):
    where = made(tmp_path)
    with _slot(where, "old work") as old:
        assert old is not None
        old.done()
    (stale,) = where.directory.glob("own-*.lock")
    week_ago = time.time() - 8 * 86_400
    os.utime(stale, (week_ago, week_ago))
    with _slot(where, "merge"):
        pass
    assert not stale.exists()


class _all_held:
    """Every slot of "merge" held by this process, as `count` concurrent leases would."""

    def __init__(self, where: MadeAt, count: int) -> None:
        self.leases = [_slot(where, "merge") for _ in range(count)]

    def __enter__(self) -> None:
        for lease in self.leases:
            assert lease.__enter__() is not None

    def __exit__(self, *exc: object) -> None:
        for lease in reversed(self.leases):
            lease.__exit__(None, None, None)
