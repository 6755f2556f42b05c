"""How many tasks a dataframe read runs in (`spark_jobs.kafka_source.coalesced_tasks`): small
ranges read together, large ranges one task each, never fewer tasks than cores."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.kafka_source import TASK_RECORDS, coalesced_tasks


@pytest.mark.parametrize(
    ("ranges", "records", "cores", "tasks"),
    [
        (12, 1_200, 2, 2),  # a small read: as many tasks as cores
        (12, 1_000_000, 2, None),  # 83,000 a range: one task each, as before
        (192, 192_000, 2, 4),  # 3 x 64 partitions of 1,000: 4 tasks of 48,000
        (768, 192_000, 2, 4),
        (12, 192_000, 2, 4),  # 3 x 4 partitions of 16,000: the same 4 tasks
        (768, 10_000_000, 2, 200),
        (2, 10, 2, None),  # no more ranges than cores: minPartitions splits them instead
        (1, 1_000_000, 8, None),
        (12, 1_200, None, None),  # record mode: one task per partition, in order
        (48, 100, 16, 16),
    ],
)
def test_tasks_of_a_read(ranges, records, cores, tasks):
    assert coalesced_tasks(ranges, records, cores) == tasks


@given(
    ranges=st.integers(1, 5_000),
    records=st.integers(0, 50_000_000),
    cores=st.integers(1, 256),
)
def test_fewer_tasks_than_ranges_never_fewer_than_cores_nor_overfull(ranges, records, cores):
    tasks = coalesced_tasks(ranges, records, cores)
    if tasks is None:  # one per range: as many ranges as cores at most, or ranges that are large
        assert ranges <= cores or -(-records // TASK_RECORDS) >= ranges
    else:
        assert cores <= tasks < ranges
        # none holds more than its share of TASK_RECORDS unless the cores bound it
        assert tasks == cores or tasks == -(-records // TASK_RECORDS)
