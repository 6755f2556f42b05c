"""Allocation of one run's record budget across levels and partitions (docs/allocation.md).

Pure arithmetic, no I/O: the caller looks up history (Postgres), backlogs and event times
(Kafka) and passes them in, so the CLI dry run, the Dagster asset and the tests all get the same
plan from the same inputs. The one entry is `AllocationPolicy(...).plan(backlogs)`; its rules
live one per module:

- `types`: the values in and out (`PartitionBacklog`, `Plan`, `LevelPlan`, ...)
- `shares`: distributors and reserved shares
- `burst`: burst eligibility and the burst from history
- `levels`: backlog awareness, each level's planned count by source
- `fill`: the max-min fair split over a level's partitions, and range ends
- `align`: event-time alignment (`max_gap_ms`)
- `wait`: the maximum wait (`max_wait`), late records first
- `policy`: `AllocationPolicy`, which combines them
"""

from drainer.allocation.align import ALIGN_SCOPES
from drainer.allocation.burst import burst_allocation, burst_eligible
from drainer.allocation.fill import range_end
from drainer.allocation.policy import AllocationPolicy
from drainer.allocation.shares import (
    DISTRIBUTORS,
    Distributor,
    WeightFunction,
    equal_weights,
    exponential_weights,
    linear_weights,
    minimum_budget,
    reserved_shares,
)
from drainer.allocation.types import (
    AlignmentWait,
    LevelPlan,
    OffsetForTime,
    PartitionBacklog,
    PartitionRange,
    Plan,
    TimestampAt,
)

__all__ = [
    "ALIGN_SCOPES",
    "DISTRIBUTORS",
    "AlignmentWait",
    "AllocationPolicy",
    "Distributor",
    "LevelPlan",
    "OffsetForTime",
    "PartitionBacklog",
    "PartitionRange",
    "Plan",
    "TimestampAt",
    "WeightFunction",
    "burst_allocation",
    "burst_eligible",
    "equal_weights",
    "exponential_weights",
    "linear_weights",
    "minimum_budget",
    "range_end",
    "reserved_shares",
]
