"""The benchmarks' read-back verdict (benchmarks/fair.py): a path's output passes only when it
is exactly the source's records, each once, and a disagreement ends the benchmark non-zero."""

from __future__ import annotations

import pytest

from benchmarks.fair import Expected

SOURCE = Expected({("t-0", 0): (0, 100), ("t-0", 1): (10, 60), ("t-1", 0): (5, 5)})
EXACT = {("t-0", 0): (100, 100, 0, 99), ("t-0", 1): (50, 50, 10, 59)}


def test_exactly_the_records_pass():
    assert SOURCE.check("path", EXACT) == 150


@pytest.mark.parametrize(
    "found",
    [
        {**EXACT, ("t-0", 0): (101, 100, 0, 99)},  # one record twice
        {**EXACT, ("t-0", 0): (99, 99, 0, 99)},  # one missing
        {**EXACT, ("t-0", 1): (50, 50, 11, 60)},  # shifted: one missing, one past the end
        {("t-0", 0): EXACT[("t-0", 0)]},  # a whole partition missing
        {**EXACT, ("t-9", 0): (1, 1, 0, 0)},  # a record of no source partition
        {**EXACT, ("t-1", 0): (1, 1, 5, 5)},  # from an empty range
    ],
)
def test_a_disagreeing_read_back_exits_non_zero(found):
    with pytest.raises(SystemExit) as exited:
        SOURCE.check("path", found)
    assert exited.value.code not in (0, None)
    assert str(exited.value).startswith("path: its output read back disagrees")
