"""Each level's planned count and where it came from: reserved, burst, or handed on.

This is backlog awareness: no level is planned beyond what it can read, and what a level
cannot use is offered to the levels with records waiting, highest first. Without it, the
history rule alone (`burst_allocation`) decides, capped by what each level can read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LevelNumbers:
    """One level's planned count, by source; `burst` is the history entitlement (+/-)."""

    burst: int
    from_reserved: int
    from_burst: int
    handed_on: int
    for_max_wait: int = 0

    @property
    def planned(self) -> int:
        return self.for_max_wait + self.from_reserved + self.from_burst + self.handed_on

    def after_grant(self, grant: int) -> LevelNumbers:
        """These numbers (planned on what a `max_wait` grant left) plus the grant itself."""
        return replace(self, for_max_wait=self.for_max_wait + grant)

    def trimmed(self, planned: int) -> LevelNumbers:
        """At most `planned`, taken off what was handed on first, then burst, then reserved,
        then what a `max_wait` grant gave."""
        cut = self.planned - planned
        handed = self.handed_on - min(cut, self.handed_on)
        cut -= self.handed_on - handed
        burst = self.from_burst - min(cut, self.from_burst)
        cut -= self.from_burst - burst
        own = self.from_reserved - min(cut, self.from_reserved)
        cut -= self.from_reserved - own
        return LevelNumbers(self.burst, own, burst, handed, self.for_max_wait - cut)


def level_numbers(
    covered: list[int],
    reserved: Mapping[int, int],
    burster: int | None,
    lendable: Mapping[int, int],
    available: Mapping[int, int],
    backlog_aware: bool,
) -> dict[int, LevelNumbers]:
    """Each level's planned count and where it came from.

    Without backlog awareness: the history rule alone (`burst_allocation`), capped by what is
    available. With it: every level first uses its reserved share as far as it has records;
    what levels cannot use is offered to the levels with records waiting, highest first, and
    the history burst only takes what no level above the burster wants. So no level is planned
    above its reserved share while a higher level could have been given more.
    """
    if not backlog_aware:
        return _history_only(covered, reserved, burster, lendable, available)

    own = {level: min(reserved[level], available[level]) for level in covered}
    burst = {level: 0 for level in covered}
    taken = {level: 0 for level in covered}  # of its burst, what the burster reads
    handed = {level: 0 for level in covered}
    spare = sum(reserved[level] - own[level] for level in covered)

    def room(level: int) -> int:
        return available[level] - own[level] - taken[level] - handed[level]

    def hand_on(levels: Iterable[int]) -> None:
        nonlocal spare
        for level in sorted(levels, reverse=True):
            take = min(spare, room(level))
            handed[level] += take
            spare -= take

    if burster is not None:
        hand_on(level for level in covered if level > burster)
        # a lender lends only what it cannot use now, and at most what history says it leaves;
        # `burst` is that whole entitlement (as stored and shown), the burster takes of it what
        # it can read, and what it cannot is offered on below
        lent = {j: min(unused, reserved[j] - own[j]) for j, unused in lendable.items()}
        entitled = min(spare, sum(lent.values()))
        taken[burster] = min(entitled, room(burster))
        burst[burster] = entitled
        spare -= taken[burster]
        owed = entitled
        for j in sorted(lent, reverse=True):
            take = min(owed, lent[j])
            burst[j] -= take
            owed -= take
    hand_on(covered)
    return {
        level: LevelNumbers(burst[level], own[level], taken[level], handed[level])
        for level in covered
    }


def _history_only(
    covered: list[int],
    reserved: Mapping[int, int],
    burster: int | None,
    lendable: Mapping[int, int],
    available: Mapping[int, int],
) -> dict[int, LevelNumbers]:
    """`backlog_aware: false`: the history burst as `burst_allocation` has it, capped by what
    each level can read; what a level cannot use stays unused."""
    numbers = {}
    for level in covered:
        burst = (
            sum(lendable.values())
            if level == burster
            else -lendable.get(level, 0)
            if burster is not None
            else 0
        )
        planned = min(reserved[level] + burst, available[level])
        own = min(reserved[level], planned)
        numbers[level] = LevelNumbers(burst, own, planned - own, 0)
    return numbers
