"""A JSON Schema file as the Spark DDL that `from_json` parses records with.

Objects become structs, arrays arrays; `integer` is a long and `number` a double, so no value
that JSON allows is cut short; a string of `"format": "date-time"` is a timestamp and of
`"format": "date"` a date (JSON Schema's RFC 3339 forms, which Spark's JSON reader parses).
Only what decoding needs is read: `type`, `format`, `properties`, `items`, `required`. A top-level
property the schema lists in `required` is `NOT NULL` in the DDL: decoding refuses a record
that lacks it (a bad record, `bad_records`), so the column never holds a null; nested ones stay
nullable, as Spark's reader makes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drainer.errors import ConfigError

_SCALARS = {
    "string": "string",
    "integer": "bigint",
    "number": "double",
    "boolean": "boolean",
}
# string formats with a Spark type of their own; other formats (email, uuid, …) stay strings
_STRING_FORMATS = {"date-time": "timestamp", "date": "date"}


def ddl_of_file(path: Path) -> str:
    """The DDL of a JSON Schema file whose top level is an object."""
    try:
        schema = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"JSON Schema {path} cannot be read: {err}") from None
    if _type(schema, str(path)) != "object":
        raise ConfigError(f"JSON Schema {path}: the top level must be an object (one column each)")
    return _fields(schema, str(path), top=True)


def _type(schema: dict[str, Any], where: str) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: nullable is Spark's default
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if not isinstance(kind, str):
        raise ConfigError(f"JSON Schema at {where}: give one `type` (and optionally null)")
    return kind


def _fields(schema: dict[str, Any], where: str, top: bool = False) -> str:
    props = schema.get("properties") or {}
    if not props:
        raise ConfigError(f"JSON Schema at {where}: an object needs `properties`")
    required = set(schema.get("required") or []) if top else set()
    unknown = sorted(required - set(props))
    if unknown:
        raise ConfigError(
            f"JSON Schema at {where}: `required` names {', '.join(unknown)}, which "
            "`properties` does not list: add it there or remove it from `required`"
        )
    return ", ".join(
        f"`{name}` {_spark_type(sub, f'{where}.{name}')}"
        + (" NOT NULL" if name in required else "")
        for name, sub in props.items()
    )


def _spark_type(schema: dict[str, Any], where: str) -> str:
    kind = _type(schema, where)
    if kind == "string" and schema.get("format") in _STRING_FORMATS:
        return _STRING_FORMATS[schema["format"]]
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return f"array<{_spark_type(schema.get('items') or {}, f'{where}[]')}>"
    if kind == "object":
        return f"struct<{_fields(schema, where)}>"
    raise ConfigError(f"JSON Schema at {where}: type {kind!r} has no Spark type")
