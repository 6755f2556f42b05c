"""Whether a processor's output has one row per row of its input, read from the plan it built.

A run counts what it read with an observation (`spark_jobs.kafka_source.counted`). Beneath a
processor it costs a copy of every record: Spark must make the read's rows into rows of its
own before an observation can see them, which a projection fused with the read never does
(~110 ns a record here, benchmarks/delta_phases.py). Above the processor the rows are already
made, and counting them there is free, but it counts the read only when each record gave
exactly one row. That is known, without asking the server, when the processor's plan over its
input is projections only (`select`, `withColumn(s)`, `drop`, renames, aliases) whose
expressions are column references, literals, casts, field access and scalar functions that
Spark evaluates row by row (`SCALAR_FUNCTIONS`). Anything else (a filter, a join, an aggregate
or generator function, a window, a UDF, a SQL string) answers False, and the run counts the
read beneath the processor as before.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

# Spark's built-in functions that give one value per input row. A name not here (an aggregate
# such as `count`, a generator such as `explode`, a window function, a UDF registered by name)
# is not proven to keep rows; the list names the common ones, not all of them.
_SCALAR_GROUPS = (
    # Column's operators, as the Connect client names them
    "+ - * / % == < <= > >= <=> and or not negative & | ^ ~ in like ilike rlike "
    "startswith endswith contains substr isnull isnotnull isnan "
    # strings and bytes
    "length char_length character_length octet_length bit_length upper lower initcap trim "
    "ltrim rtrim lpad rpad substring substring_index concat concat_ws format_string "
    "regexp_replace regexp_extract split translate replace repeat reverse instr locate left "
    "right base64 unbase64 hex unhex encode decode to_binary try_to_binary md5 sha1 sha2 "
    "crc32 hash xxhash64 uuid "
    # nulls, conditions, numbers
    "coalesce nvl nvl2 ifnull nullif if greatest least abs round bround floor ceil ceiling "
    "sqrt exp log log10 log2 pow power signum try_add try_subtract try_multiply try_divide "
    "nanvl conv bin "
    # structures
    "struct named_struct array map create_map element_at try_element_at size cardinality "
    "array_contains array_join sort_array array_distinct flatten slice arrays_zip map_keys "
    "map_values map_from_arrays str_to_map get "
    # formats
    "from_json to_json get_json_object schema_of_json from_csv to_csv from_avro to_avro "
    "from_protobuf to_protobuf parse_json try_parse_json variant_get try_variant_get "
    # time
    "to_timestamp to_date date_format from_unixtime unix_timestamp unix_millis unix_seconds "
    "timestamp_millis timestamp_seconds timestamp_micros current_timestamp current_date now "
    "year month day dayofmonth dayofweek hour minute second date_trunc date_add date_sub "
    "datediff make_date to_utc_timestamp from_utc_timestamp "
    # where a row is
    "spark_partition_id monotonically_increasing_id typeof",
)
SCALAR_FUNCTIONS = frozenset(name for group in _SCALAR_GROUPS for name in group.split())

_KEPT_PLANS = {"Project", "WithColumns", "Drop", "WithColumnsRenamed", "SubqueryAlias", "ToDF"}
_ROW_EXPRESSIONS = {
    "ColumnReference",
    "UnresolvedStar",
    "ColumnAlias",
    "LiteralExpression",
    "CastExpression",
    "CaseWhen",
    "UnresolvedExtractValue",
    "WithField",
    "DropField",
}


def preserves_rows(output: DataFrame, source: DataFrame) -> bool:
    """True when `output`, built from `source` (Spark Connect DataFrames), is projections of
    it only: one output row per source row, whatever the data. False when unsure (a classic
    DataFrame, a plan node or expression not known to keep rows)."""
    plan, until = getattr(output, "_plan", None), getattr(source, "_plan", None)
    if plan is None or until is None:
        return False
    while plan is not until:
        if type(plan).__name__ not in _KEPT_PLANS:
            return False
        if not all(_row_by_row(getattr(c, "_expr", None)) for c in _columns_of(plan)):
            return False
        plan = plan._child
    return True


def _columns_of(plan: Any) -> list[Any]:
    """The Columns a kept plan node evaluates (names need no check)."""
    return [c for c in getattr(plan, "_columns", None) or [] if not isinstance(c, str)]


def _row_by_row(expr: Any) -> bool:
    """An expression of one value per row: every node of it is a kind `_ROW_EXPRESSIONS`
    names, or a scalar function (`SCALAR_FUNCTIONS`, not `DISTINCT`)."""
    if expr is None:
        return False
    kind = type(expr).__name__
    if kind in ("UnresolvedFunction", "CallFunction"):
        name = getattr(expr, "_name", None)
        if name not in SCALAR_FUNCTIONS or getattr(expr, "_is_distinct", False):
            return False
    elif kind not in _ROW_EXPRESSIONS:
        return False
    return all(_row_by_row(child) for child in expr.children)
