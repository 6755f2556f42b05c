"""Every invalid setting fails at load time, naming the setting and the fix."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.config import ConfigError, DrainConfig, load_drains
from drainer.level_topics import topic_level

BASE = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70, "sink": {"table": "out"}}


def load(tmp_path, **overrides):
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {"orders": {**BASE, **overrides}}}))
    return load_drains(path)


def test_valid_drain_loads_with_defaults(tmp_path):
    drain = load(tmp_path)["orders"]
    assert drain.name == "orders" and drain.level_topic(2) == "orders-2"
    assert drain.level_group(0) == "billing-0"
    assert (drain.history_window, drain.maxout_threshold, drain.backlog_aware) == (6, 4, True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"budget": 5}, "set budget >= 7"),
        ({"levels": 0}, "orders.levels"),
        ({"topic": "a-b"}, "'-' separates the level suffix"),
        ({"mode": "record"}, "needs `handler"),
        ({"mode": "record", "handler": "m:f"}, "needs `output_schema`"),
        ({"processor": "no_colon"}, "package.module:function"),
        ({"maxout_threshold": 7}, "exceeds history_window"),
        ({"distributor": "fibonacci"}, "fibonacci"),
        ({"kafka": {"bootstrap.servers": "x:1"}}, "KAFKA_BOOTSTRAP_SERVERS"),
        (
            {"budgett": 5},
            "drains.orders: unknown key `budgett` in the drain; did you mean `budget`?",
        ),
        ({"ordering": "sideways"}, "orders.ordering"),
        ({"sink": {"table": "t" * 64}}, "use at most 63 bytes"),
        ({"sink": {"table": "out", "publish": "move"}}, "sink.publish"),
        ({"max_wait": "1w"}, "not a duration > 0: write a number with a unit, e.g. 90s"),
        ({"max_wait": {0: "0s"}}, "'0s' is not a duration > 0"),
        ({"max_wait": {3: "1h"}}, "max_wait names levels [3], but the drain has levels 0..2"),
        ({"budget_bytes": "12 parsecs"}, "'12 parsecs' is not a size > 0: write a number"),
        ({"budget_bytes": 0}, "0 is not a size > 0"),
        ({"run_seconds": 0}, "run_seconds: Input should be greater than 0"),
    ],
)
def test_invalid_settings_are_named(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, **overrides)
    assert message in str(info.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="DRAINER_CONFIG"):
        load_drains(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("drains: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_drains(bad)


def test_unknown_level_names_the_range(tmp_path):
    drain = load(tmp_path)["orders"]
    with pytest.raises(ConfigError, match=r"levels 0\.\.2; level 3 does not exist"):
        drain.check_level(3)


def test_every_setting_is_described_and_documented():
    """Each field says what it is where it is declared, and docs/configuration.md names it."""
    from pathlib import Path

    from drainer.config import DrainConfig
    from drainer.config.sink_models import SINK_MODELS, CatalogConfig

    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    fields = {
        **DrainConfig.model_fields,
        **{f"sink.{k}": v for m in SINK_MODELS.values() for k, v in m.model_fields.items()},
        **{f"sink.catalog.{k}": v for k, v in CatalogConfig.model_fields.items()},
    }
    for name, info in fields.items():
        assert info.description, f"{name} has no description"
        if name != "name":  # the key under `drains:`, not a setting one writes
            assert f"`{name}`" in docs, f"docs/configuration.md does not describe `{name}`"


def test_max_wait_is_one_duration_for_every_level_or_one_per_level(tmp_path):
    assert load(tmp_path)["orders"].max_wait_ms is None
    every = load(tmp_path, max_wait="1h")["orders"]
    assert every.max_wait_ms == {0: 3_600_000, 1: 3_600_000, 2: 3_600_000}
    each = load(tmp_path, max_wait={0: "2d", 2: 90})["orders"]
    assert each.max_wait_ms == {0: 172_800_000, 2: 90_000}  # a bare number is seconds
    assert load(tmp_path, max_wait="15m")["orders"].max_wait_ms[1] == 900_000


def test_budget_bytes_takes_sizes_and_run_seconds_takes_seconds(tmp_path):
    drain = load(tmp_path)["orders"]
    assert drain.budget_bytes is None and drain.run_seconds is None
    drain = load(tmp_path, budget_bytes="512MiB", run_seconds=240)["orders"]
    assert drain.budget_bytes == 512 * 1024**2 and drain.run_seconds == 240
    assert load(tmp_path, budget_bytes="100KB")["orders"].budget_bytes == 100_000
    assert load(tmp_path, budget_bytes=4096)["orders"].budget_bytes == 4096


@settings(max_examples=200)
@given(topic=st.from_regex(r"[A-Za-z0-9._]{1,40}", fullmatch=True), level=st.integers(0, 15))
def test_a_level_topic_reads_back_as_its_level(topic: str, level: int) -> None:
    """The store and the Spark read both key progress by the level `topic_level` reads off a
    topic's name: it must be the level `level_topic` named it with, for any topic allowed."""
    drain = DrainConfig(
        name="d",
        topic=topic,
        group="g",
        levels=16,
        budget=100_000,
        sink={"type": "postgres", "table": "t"},
    )
    assert topic_level(drain.level_topic(level)) == level


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        # before: the error asked for `table`, as if none had been written
        ({"tabel": "out"}, "unknown key `tabel` in sink; did you mean `table`?"),
        # before: pydantic's bare "Extra inputs are not permitted"
        ({"table": "out", "tabel": "x"}, "unknown key `tabel` in sink; did you mean `table`?"),
        ({"type": "delta", "pth": "lake/x"}, "unknown key `pth` in sink; did you mean `path`?"),
        # a block without `type` is postgres: another type's key asks for the type
        (
            {"typ": "delta", "path": "lake/x"},
            "but `path` belongs to delta sinks: set `type: delta`",
        ),
        ({"typ": "delta", "path": "lake/x"}, "unknown key `typ` in sink; did you mean `type`?"),
        ({"typ": "delta", "table": "out"}, "unknown key `typ` in sink; did you mean `type`?"),
        ({"type": "delta", "table": "t", "path": "x"}, "table cannot be used with a delta sink"),
    ],
)
def test_a_misspelt_or_misplaced_sink_key_is_named_with_the_key_meant(tmp_path, sink, message):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, sink=sink)
    assert message in str(info.value)
    assert "Extra inputs" not in str(info.value)


def test_misspelt_keys_elsewhere_are_named_too(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown key `fromat` in the format; did you mean `format`"
    ):
        load(tmp_path, value={"fromat": "json"})
    with pytest.raises(
        ConfigError, match=r"unknown key `zzz` in the drain; docs/configuration.md lists"
    ):
        load(tmp_path, zzz=1)


COORDS = ["_topic", "_partition", "_offset"]
JSON_VALUE = {"format": "json", "schema": "id long, event_type string"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"metadata_columns": [*COORDS, "_lag"]}, "names '_lag', which is no metadata column"),
        (
            {"metadata_columns": COORDS, "processor": "m:f", "value": None},
            "drop it, or declare `value`",
        ),
        (
            {"metadata_columns": COORDS, "sink": {"table": "out", "write": "upsert"}},
            "leaves out _key, which sink.primary_key reads",
        ),
        (
            {
                "metadata_columns": ["_key", "_level"],
                "sink": {"table": "out", "write": "upsert"},
            },
            "leaves out _timestamp, which sink.order_by reads",
        ),
        (
            {"metadata_columns": COORDS, "sink": {"table": "out_{_level}"}},
            "leaves out _level, which the sink's route reads",
        ),
    ],
)
def test_metadata_columns_that_drop_what_the_drain_needs_fail_at_load(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match="orders") as err:
        load(tmp_path, **{"value": JSON_VALUE, **overrides})
    assert message in str(err.value)


def test_metadata_columns_keep_their_fixed_order_and_default_to_all(tmp_path):
    chosen = ["_key", "_offset", "_topic", "_partition"]
    drain = load(tmp_path, value=JSON_VALUE, metadata_columns=chosen)["orders"]
    assert drain.metadata() == ("_topic", "_partition", "_offset", "_key")
    assert drain.unwritten_metadata() == ()
    every = load(tmp_path, value=JSON_VALUE)["orders"]
    assert len(every.metadata()) == len(every.written_metadata()) == 7
    routed = {"table": "out_{_topic}"}
    assert load(tmp_path, value=JSON_VALUE, metadata_columns=COORDS, sink=routed)["orders"]


def test_metadata_columns_may_write_none_while_the_run_reads_what_it_needs(tmp_path):
    """`[]` writes no metadata column; the coordinates are still carried (errors, dead
    letters), and an upsert's tie-breakers too, then left out of what is written."""
    appended = load(tmp_path, value=JSON_VALUE, metadata_columns=[])["orders"]
    assert appended.written_metadata() == ()
    assert appended.metadata() == appended.unwritten_metadata() == tuple(COORDS)
    state = {"table": "out", "write": "upsert", "primary_key": ["id"], "order_by": ["id"]}
    upsert = load(tmp_path, value=JSON_VALUE, metadata_columns=["_key"], sink=state)["orders"]
    assert upsert.written_metadata() == ("_key",)
    assert upsert.metadata() == ("_topic", "_partition", "_offset", "_level", "_key")
    assert upsert.unwritten_metadata() == ("_topic", "_partition", "_offset", "_level")
