"""Unknown keys in the drains file, named with the key that was meant.

pydantic's own word for a key a model does not take is "Extra inputs are not permitted", which
names neither the key nor the fix, and a misspelt required key (`tabel`) otherwise surfaces as
the missing one (`table`). Every block of the drains file checks its keys here first, and a key
close to one the block takes (difflib's ratio) is suggested.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


def unknown_keys(data: Mapping[Any, Any], known: Iterable[str], where: str) -> list[str]:
    """One problem per key of `data` that is not `known`: the key, the block, and the key
    that was probably meant (else the keys the block takes)."""
    known = sorted(set(known))
    problems = []
    for key in data:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        if close:
            hint = f"did you mean `{close[0]}`?"
        elif len(known) <= 12:
            hint = f"it takes {', '.join(known)}"
        else:  # a drain takes some forty keys: a list that long would hide the line's point
            hint = "docs/configuration.md lists the keys it takes"
        problems.append(f"unknown key `{key}` in {where}; {hint}")
    return problems


def model_keys(model: type[BaseModel]) -> set[str]:
    """The keys a model takes: its field names and their aliases."""
    keys = set(model.model_fields)
    keys.update(f.alias for f in model.model_fields.values() if f.alias)
    return keys


class KnownKeys(BaseModel):
    """A block of the drains file that refuses unknown keys by name (`WHERE`: how the
    message calls the block)."""

    model_config = ConfigDict(extra="forbid")
    WHERE: ClassVar[str] = "this block"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            problems = unknown_keys(data, model_keys(cls), cls.WHERE)
            if problems:
                raise ValueError("; ".join(problems))
        return data
