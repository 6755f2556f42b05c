"""Drains in Dagster: the asset's kinds name the format, and each drain has a daily maintenance job."""

from __future__ import annotations

import yaml

from drainer.settings import use_config_path


def test_lakehouse_drains_get_kinds_and_a_maintenance_schedule(tmp_path, monkeypatch):
    from dagster_project.definitions import build_definitions

    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path / "wh"))
    base = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70, "schedule": None}
    drains = {
        "lake": {**base, "sink": {"type": "delta", "path": "orders"}},
        "ice": {**base, "topic": "o2", "sink": {"type": "iceberg", "table": "ns.orders"}},
        "pg": {**base, "topic": "o3", "sink": {"table": "orders"}},
    }
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": drains}))
    with use_config_path(path):
        defs = build_definitions()
    graph = defs.resolve_asset_graph()
    kinds = {key.to_user_string(): graph.get(key).kinds for key in graph.get_all_asset_keys()}
    assert "delta" in kinds["lake"] and "iceberg" in kinds["ice"] and "postgres" in kinds["pg"]
    lake = graph.get(next(k for k in graph.get_all_asset_keys() if k.to_user_string() == "lake"))
    assert str(tmp_path / "wh" / "orders") in (lake.description or "")
    schedules = {s.name: s for s in defs.schedules or []}
    assert set(schedules) == {f"{d}_table_maintenance_daily" for d in ("lake", "ice", "pg")}
    assert schedules["lake_table_maintenance_daily"].job_name == "lake_table_maintenance"
    assert defs.resolve_job_def("ice_table_maintenance") is not None
