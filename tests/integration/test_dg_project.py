"""A team's `dg` project adopts drainer with the `dg` CLI: list, scaffold, check, list defs.

The project is the layout `create-dagster project` writes (pyproject with `[tool.dg]`, a root
module with `definitions.py` and a `defs` folder), in a temporary folder and run in this
virtualenv, where the `dagster_dg_cli.registry_modules` entry point of the installed drainer
names `drainer.dagster`. No services: definitions load without Kafka, Postgres or Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from dagster_project import drain_definitions
from tests.support.drains import drain_body

BIN = Path(sys.executable).parent

PYPROJECT = """\
[project]
name = "team_project"
requires-python = ">=3.11"
version = "0.1.0"
dependencies = ["dagster", "drainer"]

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "team_project"
registry_modules = ["team_project.components.*"]
"""

DEFINITIONS = """\
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def team_project(root: Path) -> Path:
    """A fresh `dg` project with an empty defs folder."""
    package = root / "src" / "team_project"
    (package / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DEFINITIONS)
    return root


def dg_cli(project: Path, *args: str) -> str:
    """`dg ...` in the project, on this virtualenv; its output, after asserting exit 0."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(BIN.parent),
        "PYTHONPATH": str(project / "src"),  # the team's package, as an install would have it
        "DAGSTER_HOME": str(project / ".dagster_home"),
    }
    env.pop("DRAINER_CONFIG", None)  # the defs.yaml names its drains file
    (project / ".dagster_home").mkdir(exist_ok=True)
    done = subprocess.run(
        [str(BIN / "dg"), *args], cwd=project, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"dg {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def test_a_dg_project_scaffolds_the_component_and_lists_each_drains_definitions(tmp_path):
    project = team_project(tmp_path / "team")
    drains_file = tmp_path / "team_drains.yaml"
    drains = {
        "orders": drain_body("orders", schedule="*/5 * * * *", max_wait="10m"),
        "clicks": drain_body("clicks", levels=2, schedule="0 * * * *"),
    }
    drains_file.write_text(yaml.safe_dump({"drains": drains}))

    assert "drainer.dagster.DrainsComponent" in dg_cli(project, "list", "components")
    dg_cli(
        project,
        "scaffold",
        "defs",
        "drainer.dagster.DrainsComponent",
        "drains",
        "--drains-file",
        str(drains_file),
    )
    defs_yaml = project / "src" / "team_project" / "defs" / "drains" / "defs.yaml"
    assert yaml.safe_load(defs_yaml.read_text()) == {
        "type": "drainer.dagster.DrainsComponent",
        "attributes": {"drains_file": str(drains_file)},
    }
    dg_cli(project, "check", "defs")
    listed = json.loads(dg_cli(project, "list", "defs", "--json"))

    factory = drain_definitions(drains_file)
    graph = factory.resolve_asset_graph()
    assert {a["asset_key"] for a in listed["assets"]} == {"orders", "clicks"}
    assert {c["key"] for c in listed["asset_checks"]} == {
        key.to_user_string() for key in graph.asset_check_keys
    }
    assert {j["name"] for j in listed["jobs"]} == {
        job.name for job in factory.resolve_all_job_defs()
    } - {"__ASSET_JOB"}
    assert {s["name"] for s in listed["schedules"]} == {s.name for s in factory.schedules or []}
    assert {s["name"] for s in listed["sensors"]} == {s.name for s in factory.sensors or []}
    # and each drain has all of them: asset, four checks, job, schedule, lag sensor, maintenance
    for name in drains:
        assert {f"{name}:{check}" for check in ("lag_within_sla", "level_health")} <= {
            c["key"] for c in listed["asset_checks"]
        }
        assert {f"{name}_job", f"{name}_table_maintenance"} <= {j["name"] for j in listed["jobs"]}
        assert {f"{name}_schedule", f"{name}_table_maintenance_daily"} <= {
            s["name"] for s in listed["schedules"]
        }
        assert f"{name}_lag_sensor" in {s["name"] for s in listed["sensors"]}
    assert [r["name"] for r in listed["resources"]] == ["drainer"]


def test_the_scaffolded_component_without_a_drains_file_loads_its_starter_file(tmp_path):
    """`dg scaffold defs drainer.dagster.DrainsComponent drains` alone writes a defs.yaml that
    loads as it is: it names a starter drains.yaml written beside it."""
    project = team_project(tmp_path / "team")
    dg_cli(project, "scaffold", "defs", "drainer.dagster.DrainsComponent", "drains")
    folder = project / "src" / "team_project" / "defs" / "drains"
    assert yaml.safe_load((folder / "defs.yaml").read_text())["attributes"] == {
        "drains_file": "drains.yaml"
    }
    assert (folder / "drains.yaml").exists()
    dg_cli(project, "check", "defs")
    listed = json.loads(dg_cli(project, "list", "defs", "--json"))
    assert [a["asset_key"] for a in listed["assets"]] == ["events"]


def test_dg_check_defs_passes_in_this_repositorys_own_dagster_project(tmp_path):
    """Before: "Cannot find module `dagster_project` in the current project" from
    dagster_project/, whose dg.toml made the folder its own project root. The repository is
    the project ([tool.dg] in pyproject.toml): from its root and from dagster_project/."""
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(BIN.parent),
        "DAGSTER_HOME": str(tmp_path),
        "DRAINER_CONFIG": str(repo / "drains.yaml"),
    }
    for where in (repo, repo / "dagster_project"):
        done = subprocess.run(
            [str(BIN / "dg"), "check", "defs"],
            cwd=where,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, (where, done.stdout[-2000:], done.stderr[-2000:])
        assert "All definitions loaded successfully" in done.stdout + done.stderr
