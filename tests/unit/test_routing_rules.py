"""Routing's pure logic (drainer.config.routing) and its configuration: templates, names, the cap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from drainer.config.routing import Router, RouteSpec, check_template, parse_template, router_of
from drainer.config.sink_models import SinkConfig
from drainer.sinks.routed import router
from spark_jobs.sinks.routed import key_values

SINK = TypeAdapter(SinkConfig)


def test_a_template_names_its_columns_once_in_order() -> None:
    t = parse_template("{b}_{a}_{b}")
    assert t.columns == ("b", "a")
    assert t.render({"a": "1", "b": "2"}) == "2_1_2"
    assert parse_template("plain").fixed


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("events_{event type}", "is not an output column"),
        ("events_{", "unmatched brace"),
        ("events}", "unmatched brace"),
        ("", "cannot be empty"),
    ],
)
def test_a_bad_template_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_template(text)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("postgres", "Events_{x}"),
        ("postgres", "select"),
        ("iceberg", "{x}"),
        ("delta", "../lake_{x}"),
    ],
)
def test_a_template_whose_fixed_parts_make_no_name_is_refused(kind: str, text: str) -> None:
    with pytest.raises(ValueError):
        check_template(kind, text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "template", "value", "name"),
    [
        ("iceberg", "shop.{t}", "orders", "shop.orders"),
        ("postgres", "events_{t}", "refund", "events_refund"),
        ("delta", "lake/{t}", "click-2", "lake/click-2"),
    ],
)
def test_a_value_fills_its_slot(kind: str, template: str, value: str, name: str) -> None:
    r = Router(kind, ("t",), parse_template(template))  # type: ignore[arg-type]
    assert r.resolve((value,)) == name


@pytest.mark.parametrize(
    ("kind", "template", "value", "why"),
    [
        ("iceberg", "shop.{t}", "a.b", "does not make a table name"),  # would escape its slot
        ("delta", "lake/{t}", "../x", "does not make a table name"),
        ("delta", "lake/{t}", "_delta_log", "does not make a table name"),
        ("postgres", "{t}", "select", "reserved SQL word"),
        ("postgres", "{t}", "runs", "drainer's own state tables"),
        ("postgres", "e_{t}", "Order", "capitals"),
        ("postgres", "e_{t}", "x" * 70, "63-byte"),
        ("iceberg", "shop.{t}", None, "is null"),
        ("iceberg", "shop.{t}", "", "does not make a table name"),
    ],
)
def test_a_value_that_makes_no_valid_name_is_rejected_naming_it(
    kind: str, template: str, value: str | None, why: str
) -> None:
    r = Router(kind, ("t",), parse_template(template))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=why):
        r.resolve((value,))
    assert r.assign([(value,)], []).rejected[(value,)]


def test_a_route_map_wins_over_the_default_and_without_a_default_unmatched_rows_are_bad() -> None:
    spec = RouteSpec("t", {"order": "shop.orders"}, "shop.{t}")
    r = router_of("iceberg", None, spec, 100)
    assert r is not None
    assert r.resolve(("order",)) == "shop.orders"
    assert r.resolve(("click",)) == "shop.click"
    strict = router_of("iceberg", None, RouteSpec("t", {"order": "shop.orders"}), 100)
    assert strict is not None
    with pytest.raises(ValueError, match="no `default`"):
        strict.resolve(("click",))


def test_past_the_cap_rows_are_rejected_naming_it_and_known_tables_stay() -> None:
    r = Router("iceberg", ("t",), parse_template("shop.{t}"), max_tables=3)
    got = r.assign([("a",), ("b",), ("c",), ("d",)], known=["shop.z", "shop.y"])
    assert got.names() == ["shop.a"]
    assert "max_tables (3 tables)" in got.rejected[("b",)]
    # a known table is always taken, even with the cap full
    full = r.assign([("z",), ("y",), ("q",)], known=["shop.z", "shop.y", "shop.x"])
    assert full.names() == ["shop.y", "shop.z"]
    assert ("q",) in full.rejected


values = st.text(alphabet="abcdefghij_0123456789.", min_size=0, max_size=6) | st.none()


@given(
    st.lists(values, max_size=30),
    st.integers(1, 8),
    st.lists(st.sampled_from("abcdef"), max_size=4),
)
def test_the_cap_holds_and_a_resumed_run_takes_the_same_tables(
    keys: list[str | None], cap: int, known_values: list[str]
) -> None:
    r = Router("iceberg", ("t",), parse_template("shop.{t}"), max_tables=cap)
    known = sorted({f"shop.{v}" for v in known_values})
    first = r.assign([(k,) for k in keys], known)
    # the drain never holds more than the cap (beyond the tables it had)
    assert len(set(known) | set(first.names())) <= max(cap, len(known))
    # every key is either written or a bad record, never both
    assert set(first.tables).isdisjoint(first.rejected)
    assert set(first.tables) | set(first.rejected) == {(k,) for k in keys}
    # a resumed run sees what the first attempt registered: it takes the very same tables
    again = r.assign([(k,) for k in keys], sorted(set(known) | set(first.names())))
    assert again.tables == first.tables
    # and a run without the bad records (the write after they were left out) does too
    kept = r.assign(list(first.tables), known)
    assert kept.tables == first.tables


@given(st.text(min_size=1, max_size=20))
def test_an_accepted_value_never_escapes_its_slot(value: str) -> None:
    r = Router("delta", ("t",), parse_template("lake/{t}/data"))
    try:
        name = r.resolve((value,))
    except ValueError:
        return
    assert name == f"lake/{value}/data" and "/" not in value and not value.startswith((".", "_"))


@pytest.mark.parametrize(
    "block",
    [
        {"type": "iceberg", "table": "shop.{event_type}"},
        {"table": "events_{event_type}", "max_tables": 5},
        {"type": "delta", "path": "lake/{event_type}", "value_schema_per_route": True},
        {
            "type": "iceberg",
            "route": {
                "by": "event_type",
                "tables": {"order": "shop.orders"},
                "default": "shop.other",
            },
        },
        {"type": "delta", "route": {"by": "level", "tables": {2: "lake/two", True: "lake/yes"}}},
    ],
)
def test_routed_sinks_load(block: dict[str, object]) -> None:
    config = SINK.validate_python(block)
    assert config.routed  # type: ignore[union-attr]
    assert router(config) is not None


def test_bool_and_number_route_keys_compare_as_spark_casts_them() -> None:
    config = SINK.validate_python(
        {"type": "delta", "route": {"by": "level", "tables": {2: "lake/two", True: "lake/yes"}}}
    )
    r = router(config)
    assert r is not None
    assert r.resolve(("2",)) == "lake/two" and r.resolve(("true",)) == "lake/yes"


def test_a_fixed_table_is_not_routed() -> None:
    assert router(SINK.validate_python({"table": "t"})) is None


@pytest.mark.parametrize(
    "block",
    [
        {"table": "t", "write": "upsert"},
        {"type": "delta", "path": "p", "write": "upsert"},
        {"type": "iceberg", "table": "shop.{t}", "max_tables": 3, "write": "upsert"},
        {
            "type": "delta",
            "route": {"by": "t", "default": "lake/{t}"},
            "value_schema_per_route": True,
            "write": "upsert",
        },
    ],
)
def test_a_dumped_sink_loads_again_as_it_was(block: dict[str, object]) -> None:
    """(An upsert sink's: an append sink's dump holds the upsert keys' defaults, which load as
    keys given to an append sink.)"""
    config = SINK.validate_python(block)
    assert SINK.validate_python(config.model_dump()) == config  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (
            {"type": "iceberg", "table": "shop.x", "route": {"by": "t", "default": "shop.y"}},
            "not both",
        ),
        ({"type": "iceberg", "route": {"by": "t"}}, "route needs `tables`, `default`"),
        ({"table": "t", "max_tables": 4}, "only apply to a routed sink"),
        ({"table": "e_{t}", "max_tables": 0}, "greater than or equal to 1"),
        ({"type": "iceberg", "route": {"by": "t", "tables": {"a": "nonamespace"}}}, "route.tables"),
        ({"type": "iceberg", "route": {"by": "a b", "default": "s.x"}}, "not a column name"),
        ({"type": "delta", "route": {"by": "t", "default": "x", "bogus": 1}}, "bogus"),
    ],
)
def test_a_bad_routing_block_is_one_clear_error(block: dict[str, object], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        SINK.validate_python(block)


def test_a_routed_run_shows_one_row_per_table_and_another_run_none() -> None:
    from drainer.cli.routed_tables import table_rows
    from drainer.sinks.routed import rows_per_table

    commit = {
        "details": {
            "tables": {
                "shop.b": {"version": 3, "rows_added": 5, "bytes_added": 50},
                "shop.a": {"version": 1, "rows_added": 2, "bytes_added": 20},
            }
        }
    }
    rows = rows_per_table({}, commit)  # a table format's: from its table commits
    assert rows == {"shop.a": 2, "shop.b": 5}
    assert table_rows(7, commit, rows) == [["7", "shop.a", "1", 2, 20], ["7", "shop.b", "3", 5, 50]]
    # a Postgres sink's: as its commit recorded them; its tables have no commit of their own
    published = rows_per_table({"events_b": 4, "events_a": 1}, None)
    assert table_rows(8, None, published) == [
        ["8", "events_a", "-", 1, "-"],
        ["8", "events_b", "-", 4, "-"],
    ]
    assert rows_per_table({}, {"details": {"produced": {"t": 1}}}) == {}
    assert table_rows(7, None, {}) == []


def _key_text(values: tuple[str | None, ...]) -> str:
    """The key text spark_jobs.sinks.routed `_key` has Spark make, made here in Python."""
    return "".join("-" if v is None else f"{len(v)}:{v}" for v in values)


@given(st.lists(st.one_of(st.none(), st.text()), min_size=1, max_size=4).map(tuple))
def test_a_route_keys_text_gives_back_its_values(values: tuple[str | None, ...]) -> None:
    assert key_values(_key_text(values)) == values


def test_route_key_texts_of_different_values_differ() -> None:
    """Values holding the separators still make texts that tell them apart."""
    cases = [("a", None), (None, "a"), ("1:a",), ("1", "a"), ("-",), (None,), ("",), ("", "")]
    assert len({_key_text(v) for v in cases}) == len(cases)
