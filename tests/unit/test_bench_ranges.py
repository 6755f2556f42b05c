"""The ranges every Spark limit and peer of the benchmarks reads (benchmarks/fair.py): exactly
the source's, in the JSON shape Spark's Kafka source options take."""

from __future__ import annotations

from benchmarks.fair import Expected


def test_the_ranges_as_spark_options():
    source = Expected({("t-1", 0): (5, 5), ("t-0", 1): (10, 60), ("t-0", 0): (0, 100)})
    assign, start, end = source.spark_offsets()
    assert assign == {"t-0": [0, 1], "t-1": [0]}
    assert start == {"t-0": {"0": 0, "1": 10}, "t-1": {"0": 5}}
    assert end == {"t-0": {"0": 100, "1": 60}, "t-1": {"0": 5}}
