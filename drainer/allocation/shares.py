"""Reserved shares: how a run's budget is split over the levels it covers, before any burst.

The distributor gives each covered level a weight; a level's share is its exact rational part of
the budget, rounded down, with the leftover on the highest level. `minimum_budget` is the
smallest budget that gives every level at least one record, which config validation enforces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction

from drainer.processing.callables import load_callable

WeightFunction = Callable[[list[int]], Sequence[float]]
"""A pluggable distributor: the covered levels (ascending) in, one positive weight per level out."""

Distributor = str | Sequence[float] | Mapping[int, float] | WeightFunction
"""A registry name, an import path `package.module:function`, explicit weights, or a callable."""


def exponential_weights(levels: list[int]) -> list[int]:
    """Weight 2**i: each level gets about twice the level below it (the default)."""
    return [2**level for level in levels]


def linear_weights(levels: list[int]) -> list[int]:
    """Weight i+1: a gentler slope for drains with many levels, where 2**i would starve level 0."""
    return [level + 1 for level in levels]


def equal_weights(levels: list[int]) -> list[int]:
    """Weight 1: a flat split, for drains whose levels are partitions of work, not priorities."""
    return [1 for _ in levels]


DISTRIBUTORS: dict[str, WeightFunction] = {
    "exponential": exponential_weights,
    "linear": linear_weights,
    "equal": equal_weights,
}
"""Distributors known by name; anything else is given as an import path or as weights."""


# --- reserved shares ---------------------------------------------------------------------


def reserved_shares(
    levels: int | Iterable[int],
    budget: int,
    distributor: Distributor = "exponential",
) -> dict[int, int]:
    """Each covered level's reserved part of `budget`, summing exactly to `budget`.

    share_i = floor(budget * w_i / sum(w)) in exact rational arithmetic (so float weights cannot
    lose or invent a record); what rounding leaves over goes to the highest covered level.
    """
    covered = covered_levels(levels)
    check_budget(budget)
    weights = _weights(covered, distributor)
    minimum = _minimum_budget(weights)
    if budget < minimum:
        raise ValueError(
            f"budget {budget} is too small for levels {covered} with "
            f"{_describe(distributor)}: every level needs at least 1 record, "
            f"so set budget >= {minimum}"
        )
    total = sum(weights)
    shares = [math.floor(budget * weight / total) for weight in weights]
    shares[-1] += budget - sum(shares)
    return dict(zip(covered, shares, strict=True))


def minimum_budget(levels: int | Iterable[int], distributor: Distributor = "exponential") -> int:
    """The smallest budget giving every covered level at least 1 record (for config validation)."""
    return _minimum_budget(_weights(covered_levels(levels), distributor))


def _minimum_budget(weights: list[Fraction]) -> int:
    # floor(B*w_i/W) >= 1 iff B >= ceil(W/w_i). The highest level needs no term: its share is
    # B - sum of the others' floors >= B*w_top/W > 0, hence >= 1, for any B >= 1.
    total = sum(weights)
    return max((math.ceil(total / weight) for weight in weights[:-1]), default=1)


def covered_levels(levels: int | Iterable[int]) -> list[int]:
    if isinstance(levels, int) and not isinstance(levels, bool):
        if levels < 1:
            raise ValueError(
                f"levels {levels}: a drain needs at least 1 priority level, so set levels >= 1"
            )
        return list(range(levels))
    covered = sorted(set(levels))  # type: ignore[arg-type]  # a bool is refused below
    if not covered:
        raise ValueError("levels is empty: cover at least one priority level (0..N-1)")
    for level in covered:
        if isinstance(level, bool) or not isinstance(level, int):
            raise ValueError(f"level {level!r} is not an integer: levels are 0..N-1")
        if level < 0:
            raise ValueError(f"level {level} is negative: priority levels are numbered 0..N-1")
    return covered


def check_budget(budget: int) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(
            f"budget {budget!r} is not a positive whole number of records: set budget >= 1"
        )


def _describe(distributor: Distributor) -> str:
    if isinstance(distributor, str):
        if distributor in DISTRIBUTORS:
            return f"the {distributor} distributor"
        return f"the distributor {distributor!r}"
    if isinstance(distributor, Mapping | Sequence):
        return "explicit distributor weights"
    name = getattr(distributor, "__qualname__", None) or repr(distributor)
    return f"the distributor {name}"


def _weights(levels: list[int], distributor: Distributor) -> list[Fraction]:
    """Resolve the distributor to exact positive weights, one per covered level (ascending)."""
    raw: Sequence[object]  # a user's function may return anything: each weight is checked below
    if isinstance(distributor, str):
        if distributor in DISTRIBUTORS:
            raw = DISTRIBUTORS[distributor](list(levels))
        elif ":" in distributor:
            raw = load_callable(distributor, "distributor")(list(levels))
        else:
            raise ValueError(
                f"distributor {distributor!r} is unknown: use one of "
                f"{', '.join(sorted(DISTRIBUTORS))}, explicit weights, "
                "or an import path 'package.module:function'"
            )
    elif isinstance(distributor, Mapping):
        missing = [level for level in levels if level not in distributor]
        if missing:
            raise ValueError(
                f"distributor weights have no weight for levels {missing}: "
                "give a weight for every covered level"
            )
        raw = [distributor[level] for level in levels]
    elif callable(distributor):
        raw = distributor(list(levels))
    elif isinstance(distributor, Sequence):
        if levels[-1] >= len(distributor):
            raise ValueError(
                f"the distributor weights list has {len(distributor)} weights (levels 0.."
                f"{len(distributor) - 1}) but level {levels[-1]} is covered: "
                "give one weight per level, indexed by level"
            )
        raw = [distributor[level] for level in levels]
    else:
        raise ValueError(
            f"distributor {distributor!r} is not a name, an import path, weights or a callable"
        )
    raw = list(raw)
    if len(raw) != len(levels):
        raise ValueError(
            f"{_describe(distributor)} returned {len(raw)} weights for {len(levels)} levels "
            f"{levels}: it must return one weight per level, in the same order"
        )
    return [
        _positive_weight(level, weight, distributor)
        for level, weight in zip(levels, raw, strict=True)
    ]


def _positive_weight(level: int, weight: object, distributor: Distributor) -> Fraction:
    problem = "is not a number"
    if not isinstance(weight, str | bytes | bool):
        try:
            exact = Fraction(weight)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            exact = None
        if exact is not None:
            if exact > 0:
                return Fraction(exact)
            problem = "is not positive"
    raise ValueError(
        f"{_describe(distributor)} gives level {level} the weight {weight!r}, which {problem}: "
        "distributor weights must be finite numbers > 0"
    )
