"""max_wait in overload: per-level configurations, and one policy change tried, not adopted.

  .venv/bin/python benchmarks/max_wait_variants.py

The setting of benchmarks/policy_simulator.py (3 levels, budget 7,000, a run every 5 min, runs
of 20 s + records / 50 + bytes / 100,000, records of 2,000 / 1,000 / 500 bytes). Prints each
level's p99 wait (levels 2 / 1 / 0, minutes) on the built-in traces for strict priority, drainer,
and drainer with several `max_wait` mappings; then the variant "a lower level's late grant
leaves each higher level its reserved share as far as it has records", which replaces
`late_grants` in this process only. The variant breaks rule 1 of issue 19 ("up to the whole
budget"); it is here to measure what that rule costs the top level (docs/allocation.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import drainer.allocation.policy as policy_module
from drainer.allocation.shares import reserved_shares
from drainer.allocation.simulate import TRACES, Drain, Result, Throughput, builtin_trace, compare
from drainer.allocation.types import PartitionBacklog, Plan

MINUTE = 60_000
SPEED = Throughput(20, 50, 100_000, (2000.0, 1000.0, 500.0))
BASE = Drain(levels=3, budget=7000)
MAPPINGS: dict[str, dict[int, int]] = {
    "30m on every level": dict.fromkeys(range(3), 30 * MINUTE),
    "{2: 10m}": {2: 10 * MINUTE},
    "{2: 10m, 0: 60m}": {2: 10 * MINUTE, 0: 60 * MINUTE},
    "{2: 10m, 1: 30m, 0: 60m}": {2: 10 * MINUTE, 1: 30 * MINUTE, 0: 60 * MINUTE},
}
_seen: dict[str, object] = {}  # the backlogs and distributor of the plan being made


def _p99(result: Result) -> str:
    return " / ".join(f"{lv.p99_wait_min:g}" for lv in result.levels)


def _variant_grants(
    covered: list[int], late_by_level: Mapping[int, int], budget: int
) -> dict[int, int]:
    """Highest level first, as rule 1; but a level's grant leaves every higher level its reserved
    share as far as that level has records."""
    backlog: Mapping[int, int] = _seen["backlog"]  # type: ignore[assignment]
    reserved = reserved_shares(covered, budget, _seen["distributor"])  # type: ignore[arg-type]
    grants: dict[int, int] = {}
    left = budget
    for level in sorted(covered, reverse=True):
        keep = sum(max(0, min(reserved[h], backlog.get(h, 0)) - grants[h]) for h in grants)
        grants[level] = max(0, min(late_by_level.get(level, 0), left - keep))
        left -= grants[level]
    return grants


def main() -> None:
    started = time.perf_counter()
    for name in TRACES:
        trace = builtin_trace(name, BASE)
        strict, plain = compare(BASE, trace, 5, ["strict", "drainer"], SPEED)
        print(f"{name}: strict {_p99(strict)}; drainer {_p99(plain)}")
        for label, limits in MAPPINGS.items():
            (result,) = compare(
                replace(BASE, max_wait_ms=limits), trace, 5, ["drainer+max_wait"], SPEED
            )
            print(f"  max_wait {label}: {_p99(result)}")
    original_plan = policy_module.AllocationPolicy.plan
    original_grants = policy_module.late_grants  # type: ignore[attr-defined]

    def plan(self: policy_module.AllocationPolicy, backlogs: Sequence[PartitionBacklog]) -> Plan:
        _seen["backlog"] = {b.level: b.backlog for b in backlogs}
        _seen["distributor"] = self.distributor
        return original_plan(self, backlogs)

    policy_module.AllocationPolicy.plan = plan  # type: ignore[method-assign]
    policy_module.late_grants = _variant_grants  # type: ignore[attr-defined]
    try:
        print("variant (lower levels' late grants leave higher levels their reserved shares):")
        for name in TRACES:
            drain = replace(BASE, max_wait_ms=MAPPINGS["30m on every level"])
            (result,) = compare(drain, builtin_trace(name, drain), 5, ["drainer+max_wait"], SPEED)
            print(f"  {name}, max_wait 30m on every level: {_p99(result)}")
    finally:
        policy_module.AllocationPolicy.plan = original_plan  # type: ignore[method-assign]
        policy_module.late_grants = original_grants  # type: ignore[attr-defined]
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
