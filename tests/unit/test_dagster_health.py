"""The `level_health` asset check and metadata (dagster_project.health_checks) from given healths."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_project.health_checks import health_check, health_metadata
from drainer.observe.health_rules import Health, LevelHealth


def health(level: int, state: Health, backlog: int = 10) -> LevelHealth:
    return LevelHealth(level, backlog, None, 1.0, 2.0, 10.0, False, state, f"{state} reason")


@pytest.mark.parametrize(
    ("states", "passed", "severity"),
    [
        ([Health.OK, Health.OK], True, dg.AssetCheckSeverity.WARN),
        ([Health.OK, Health.WARN], False, dg.AssetCheckSeverity.WARN),
        ([Health.WARN, Health.STALL], False, dg.AssetCheckSeverity.ERROR),
        ([Health.STOP, Health.OK], False, dg.AssetCheckSeverity.ERROR),
    ],
)
def test_check_warns_on_warn_and_fails_on_stall_or_stop(states, passed, severity):
    result = health_check({lvl: health(lvl, s) for lvl, s in enumerate(states)})
    assert result.passed is passed and result.severity is severity
    for lvl, state in enumerate(states):
        assert result.metadata[f"level_{lvl}_health"].value == state.value
        if state is not Health.OK:
            assert f"level {lvl} {state.value}: {state} reason" in (result.description or "")


def test_metadata_has_the_same_keys_known_or_not():
    known = health_metadata(health(0, Health.OK))
    unknown = health_metadata(LevelHealth(1, 0, None, None, None, 0.0, False, Health.OK, "empty"))
    assert set(known) == set(unknown)
    assert known["eta_s"].value == 10.0 and known["health"].value == "OK"
    assert unknown["arrival_rate"] == dg.MetadataValue.null()
