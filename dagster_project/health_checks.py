"""Level health on the Dagster asset: per-level metadata and the `level_health` asset check.

Both come from one `drainer.observe.drain_health.drain_health` call made in the drain's step
after the run, the same numbers `drainer status` shows. The check warns while a level is
throttled but progressing (WARN) and fails when a level's committed offset does not move while
records wait (STALL) or no run drains it (STOP).
"""

from __future__ import annotations

import dagster as dg

from drainer.config import DrainConfig
from drainer.observe.drain_health import drain_health
from drainer.observe.health_rules import Health, LevelHealth
from drainer.settings import Settings

CHECK_NAME = "level_health"


def level_health_spec(drain: DrainConfig) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        CHECK_NAME,
        asset=drain.name,
        description="Every level OK by Burrow's rules; warns on WARN (throttled but "
        "progressing), fails on STALL (offset not moving while records wait) or STOP "
        "(no run drains the level).",
    )


def levels_health(drain: DrainConfig, settings: Settings) -> dict[int, LevelHealth]:
    """Each level's health now (Kafka and Postgres reads: call once per step)."""
    return drain_health(drain, settings=settings)


def health_metadata(health: LevelHealth) -> dict[str, dg.MetadataValue]:
    """A level partition's health numbers; the same keys on every partition (null when
    unknown), so the UI plots oldest age, rates and ETA by partition and over time."""

    def number(value: float | None, digits: int) -> dg.MetadataValue:
        return (
            dg.MetadataValue.null()
            if value is None
            else dg.MetadataValue.float(round(value, digits))
        )

    return {
        "oldest_age_s": number(health.oldest_age_s, 1),
        "arrival_rate": number(health.arrival_rate, 3),
        "drain_rate": number(health.drain_rate, 3),
        "eta_s": number(health.eta_s, 1),
        "eta": dg.MetadataValue.text(health.eta_text()),
        "health": dg.MetadataValue.text(health.state.value),
        "health_reason": dg.MetadataValue.text(health.reason),
    }


def health_check(healths: dict[int, LevelHealth]) -> dg.AssetCheckResult:
    """Passes when every level is OK; the worst level decides the severity."""
    bad = [h for h in sorted(healths.values(), key=lambda h: -h.level) if h.state != Health.OK]
    failing = any(h.state in (Health.STALL, Health.STOP) for h in bad)
    description = (
        "; ".join(f"level {h.level} {h.state.value}: {h.reason}" for h in bad)
        if bad
        else f"all {len(healths)} levels OK"
    )
    metadata: dict[str, dg.MetadataValue] = {
        f"level_{h.level}_health": dg.MetadataValue.text(h.state.value) for h in healths.values()
    }
    for state in Health:
        metadata[f"levels_{state.value.lower()}"] = dg.MetadataValue.int(
            sum(1 for h in healths.values() if h.state is state)
        )
    return dg.AssetCheckResult(
        check_name=CHECK_NAME,
        passed=not bad,
        severity=dg.AssetCheckSeverity.ERROR if failing else dg.AssetCheckSeverity.WARN,
        description=description,
        metadata=metadata,
    )
