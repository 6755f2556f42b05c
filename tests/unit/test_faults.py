"""Crash points read the fault their run was handed (`Settings.fault`), not the environment."""

from __future__ import annotations

from drainer import faults


def test_a_crash_point_is_armed_only_by_the_run_it_was_handed_to(monkeypatch):
    monkeypatch.setenv("DRAINER_FAULT", "after_plan")  # what a new load_settings() would say
    assert not faults.armed("after_plan")  # no run holds it: the environment is not read
    with faults.armed_for("after_commit"):
        assert faults.armed("after_commit") and not faults.armed("after_plan")
        with faults.armed_for(None):  # a run inside, handed no fault
            assert not faults.armed("after_commit")
        assert faults.armed("after_commit")
    assert not faults.armed("after_commit")
