"""`drainer plan`'s tables say where each level's planned records come from, and whom budget
was handed on to, from which levels."""

from __future__ import annotations

from drainer.allocation.types import LevelPlan
from drainer.cli.runs import handed_on_lines


def _level(level: int, allocated: int, planned: int, handed_on: int = 0) -> LevelPlan:
    return LevelPlan(
        level=level,
        reserved=allocated,
        burst=0,
        allocated=allocated,
        backlog=planned,
        planned=planned,
        from_reserved=planned - handed_on,
        handed_on=handed_on,
    )


def test_handed_on_names_the_level_that_got_it_and_the_levels_that_left_it():
    """Before: a "handed on" column that did not say to whom (docs/allocation.md's example)."""
    levels = [_level(2, 4000, 80), _level(1, 2000, 1100), _level(0, 1000, 5820, handed_on=4820)]
    assert handed_on_lines(levels) == [
        "handed on: level 0 got 4,820 of the budget that levels 2, 1 could not use"
    ]
    assert handed_on_lines([_level(1, 10, 10), _level(0, 5, 5)]) == []
