"""The routing part of a table sink's configuration (docs/configuration.md, "Routing"): a
`route:` block, or a table template, and the limits of a routed sink. The names they make are
checked by drainer.config.routing against each sink's name rules."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class RouteConfig(BaseModel):
    """A `route:` block: which table each row goes to, by the value of one output column."""

    model_config = ConfigDict(extra="forbid")

    by: str = Field(
        description="the output column whose value picks the table (a value field, `_topic`, "
        "`_level`, or a column a processor makes, e.g. from a header)",
    )
    tables: dict[str, str] = Field(
        default_factory=dict,
        description="optional fixed map from a value of `by` to its table (a Delta path): "
        "`{order: shop.orders, refund: shop.refunds}`",
    )
    default: str | None = Field(
        default=None,
        description="the table of rows whose value is in no `tables` entry; may be a template "
        "over output columns (`shop.{event_type}`). Without it, such rows are bad records",
    )

    @field_validator("by")
    @classmethod
    def _by_column(cls, value: str) -> str:
        if not _COLUMN.match(value):
            raise ValueError(f"route.by {value!r} is not a column name: letters, digits, '_'")
        return value

    @field_validator("tables", mode="before")
    @classmethod
    def _string_keys(cls, value: Any) -> Any:
        # YAML reads `1:` and `true:` as a number and a boolean; the column's value is compared
        # as text, as Spark casts it (`true`, not Python's `True`)
        if isinstance(value, dict):
            return {
                (str(k).lower() if isinstance(k, bool) else str(k)): v for k, v in value.items()
            }
        return value


class _Routed(BaseModel):
    """Routing (docs/configuration.md, "Routing"): a table template or a `route` block, checked
    against the sink's name rules by drainer.config.routing."""

    route: RouteConfig | None = Field(
        default=None,
        description="route each row to a table by an output column's value (`by`, optional "
        "`tables` map, `default`); instead of `table`/`path`, which may also be a template "
        "over output columns such as `shop.{event_type}`",
    )
    value_schema_per_route: bool = Field(
        default=False,
        description="routed sinks: each table gets only the columns its own rows carry (the "
        "columns non-null in some row routed to it), and evolves on its own; default: every "
        "table gets every output column",
    )
    max_tables: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="routed sinks: the most tables one drain may route to, so a bad field "
        "cannot create thousands; rows routed past it are bad records naming the cap",
    )

    @model_validator(mode="after")
    def _route_names(self) -> _Routed:
        from drainer.config.routing import Kind, check_name, check_template

        kind: Kind = getattr(self, "type", "postgres")
        name = getattr(self, NAME_FIELDS[kind])
        if self.route is not None:
            if name:
                raise ValueError(
                    f"give either `{NAME_FIELDS[kind]}` (a name or template) or `route`, not "
                    f"both: move {name!r} to `route.default`"
                )
            if not self.route.tables and self.route.default is None:
                raise ValueError("route needs `tables`, `default` or both, naming where rows go")
            for value, table in self.route.tables.items():
                try:
                    check_name(kind, table)
                except ValueError as err:
                    raise ValueError(f"route.tables[{value!r}]: {err}") from None
            if self.route.default is not None:
                check_template(kind, self.route.default)
        elif self.routed:
            check_template(kind, name)
        # as values, not as keys given: a dumped sink (`model_dump()`) loads again
        if not self.routed and (self.value_schema_per_route or self.max_tables != 100):
            raise ValueError(
                "value_schema_per_route and max_tables only apply to a routed sink (a "
                "template such as `shop.{event_type}`, or `route`): remove them"
            )
        return self

    @property
    def routed(self) -> bool:
        """The sink writes many tables: a template or a route."""
        kind = getattr(self, "type", "postgres")
        return self.route is not None or "{" in str(getattr(self, NAME_FIELDS[kind]) or "")


# the key that names a sink's table, per type: where a template or a route's names go
NAME_FIELDS = {"postgres": "table", "iceberg": "table", "delta": "path"}
