"""Routing: one drain's rows into many tables, named by the rows' own values (pure, no I/O).

A sink names its table with a template over output columns (`shop.{event_type}`,
`events_{event_type}`, Delta's `lake/{event_type}`), or with a `route` block: a column, a fixed
map from its values to tables, and a default (itself a name or a template). A `Router` turns the
route values of a run's rows into table names:

- a value is substituted whole into its slot, so it can never escape it: a value that is not
  one name part (a `.` in an Iceberg name, a `/` in a path, a space, nothing at all), a name
  its format refuses (a reserved or drainer's own Postgres table, too long) and a null value
  without a default are *rejected* with the reason, and its rows become bad records;
- the drain's tables are capped (`max_tables`): the tables it already has stay; new names are
  taken in sorted order while the cap allows, so a resumed run, which sees the names its crashed
  attempt registered as its own, takes the same ones; the rows of the others are rejected naming
  the cap.

The same rows always resolve the same way, which is what lets a resumed run find which of its
tables already hold its commit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from drainer.config.route_models import NAME_FIELDS
from drainer.store.sink_names import check_table_name

Kind = Literal["postgres", "delta", "iceberg"]
RouteKey = tuple[str | None, ...]
"""A row's route values, as strings (null as None), in `Router.columns` order."""

DEFAULT_MAX_TABLES = 100
MAX_VALUE_CHARS = 128
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ICEBERG_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# a value that fills a slot: one part of a name (identifier characters; `-` too in a path)
_NAME_PART = re.compile(r"^[A-Za-z0-9_]+$")
# (not starting with `_` or `.`: Spark and Delta take such folders for their own, `_delta_log`)
_PATH_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Template:
    """A table name with `{column}` slots; a name without slots is a template of none."""

    text: str
    columns: tuple[str, ...]

    def render(self, values: Mapping[str, str]) -> str:
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.text)

    @property
    def fixed(self) -> bool:
        return not self.columns


def parse_template(text: str) -> Template:
    """`text` as a template; a ValueError says what is wrong with a slot or a brace."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a table name or template cannot be empty")
    columns: list[str] = []
    for m in _PLACEHOLDER.finditer(text):
        name = m.group(1)
        if not _COLUMN.match(name):
            raise ValueError(
                f"{text!r}: {{{name}}} is not an output column: a slot names one column, "
                "e.g. {event_type}"
            )
        if name not in columns:
            columns.append(name)
    if "{" in _PLACEHOLDER.sub("", text) or "}" in _PLACEHOLDER.sub("", text):
        raise ValueError(f"{text!r} has an unmatched brace: slots are written {{column}}")
    return Template(text, tuple(columns))


def check_name(kind: Kind, name: str) -> str:
    """A whole table name (or Delta path) that `kind` stores: a ValueError says why not."""
    if kind == "postgres":
        if not _IDENTIFIER.match(name):
            raise ValueError(
                f"'{name}' is not a plain SQL identifier (letters, digits, underscores)"
            )
        return check_table_name(name)
    if kind == "iceberg":
        if not _ICEBERG_TABLE.match(name):
            raise ValueError(f"'{name}' is not `namespace.table` (identifiers joined by '.')")
        return name
    if not name.strip() or any(part in (".", "..") for part in name.split("/")):
        raise ValueError(f"'{name}' is not a table path (a '.' or '..' part)")
    return name


def check_template(kind: Kind, text: str) -> Template:
    """A sink's table or path as a template: its fixed parts must make a valid name (checked
    with every slot filled by a plain value)."""
    template = parse_template(text)
    check_name(kind, template.render({c: "x" for c in template.columns}))
    return template


def _value_problem(kind: Kind, column: str, value: str | None) -> str | None:
    if value is None:
        return f"route column {column} is null"
    rule = _PATH_PART if kind == "delta" else _NAME_PART
    if len(value) > MAX_VALUE_CHARS or not rule.match(value):
        shown = value if len(value) <= 40 else value[:40] + "…"
        allowed = (
            "letters, digits, '_', '.', '-', first a letter or digit"
            if kind == "delta"
            else "letters, digits, '_'"
        )
        return (
            f"route value {shown!r} of {column} does not make a table name (a value fills one "
            f"part of the name: {allowed}, at most {MAX_VALUE_CHARS} characters)"
        )
    return None


@dataclass(frozen=True)
class Router:
    """How a sink's rows find their table: `columns` are the route columns (in key order),
    `tables` a fixed map from the first column's value, `fallback` the template for every
    other value (None: such rows are rejected), `max_tables` the drain's cap."""

    kind: Kind
    columns: tuple[str, ...]
    fallback: Template | None
    tables: Mapping[str, str] = field(default_factory=dict)
    max_tables: int = DEFAULT_MAX_TABLES

    def resolve(self, key: RouteKey) -> str:
        """The table of a row with route values `key`; a ValueError says why it has none."""
        values = dict(zip(self.columns, key, strict=True))
        first = key[0] if key else None
        if self.tables and first is not None and first in self.tables:
            return self.tables[first]
        if self.fallback is None:
            if first is None:
                raise ValueError(
                    f"route column {self.columns[0]} is null and the route has no default"
                )
            raise ValueError(
                f"route value {first!r} of {self.columns[0]} is in no `route.tables` and the "
                "route has no `default`"
            )
        for column in self.fallback.columns:
            problem = _value_problem(self.kind, column, values[column])
            if problem:
                raise ValueError(problem)
        name = self.fallback.render({c: str(values[c]) for c in self.fallback.columns})
        try:
            return check_name(self.kind, name)
        except ValueError as err:
            raise ValueError(f"route makes an invalid table name: {err}") from None

    def assign(self, keys: Iterable[RouteKey], known: Iterable[str]) -> Assignment:
        """Each distinct key's table, or why its rows are bad records, given the tables the
        drain already has (`known`, which the cap never takes away)."""
        have = set(known)
        tables: dict[RouteKey, str] = {}
        rejected: dict[RouteKey, str] = {}
        wanted: dict[RouteKey, str] = {}
        for key in set(keys):
            try:
                wanted[key] = self.resolve(key)
            except ValueError as err:
                rejected[key] = str(err)
        room = max(0, self.max_tables - len(have))
        new = sorted({name for name in wanted.values() if name not in have})
        taken = have | set(new[:room])
        for key, name in wanted.items():
            if name in taken:
                tables[key] = name
            else:
                rejected[key] = (
                    f"table {name!r} would be past the drain's max_tables "
                    f"({self.max_tables} tables): raise sink.max_tables or route fewer values"
                )
        return Assignment(tables, rejected)


@dataclass(frozen=True)
class Assignment:
    """A run's route keys: the table of each that has one, the reason of each that has none."""

    tables: Mapping[RouteKey, str]
    rejected: Mapping[RouteKey, str]

    def names(self) -> list[str]:
        """The tables the run writes, sorted (the order a run commits them)."""
        return sorted(set(self.tables.values()))

    def new_names(self, known: Iterable[str]) -> list[str]:
        have = set(known)
        return [n for n in self.names() if n not in have]


def router(config: Any) -> Router | None:
    """The router of a sink's configuration; None for a sink that writes one table."""
    field = NAME_FIELDS.get(config.type)
    if field is None or not getattr(config, "routed", False):
        return None
    route = config.route
    spec = None if route is None else RouteSpec(route.by, dict(route.tables), route.default)
    kind: Kind = config.type
    return router_of(kind, getattr(config, field) or None, spec, config.max_tables)


def router_of(
    kind: Kind, name: str | None, route: RouteSpec | None, max_tables: int
) -> Router | None:
    """The router of a sink's configuration, or None when it writes one fixed table."""
    if route is None:
        if name is None:
            return None
        template = parse_template(name)
        if template.fixed:
            return None
        return Router(kind, template.columns, template, max_tables=max_tables)
    fallback = parse_template(route.default) if route.default is not None else None
    columns = (route.by, *(c for c in (fallback.columns if fallback else ()) if c != route.by))
    return Router(kind, columns, fallback, dict(route.tables), max_tables)


@dataclass(frozen=True)
class RouteSpec:
    """A `route:` block as plain values (drainer.config.sink_models checks it)."""

    by: str
    tables: Mapping[str, str] = field(default_factory=dict)
    default: str | None = None


__all__ = [
    "DEFAULT_MAX_TABLES",
    "Assignment",
    "Kind",
    "RouteKey",
    "RouteSpec",
    "Router",
    "Template",
    "check_name",
    "check_template",
    "parse_template",
    "router_of",
]
