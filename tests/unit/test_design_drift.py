"""docs/design.md cannot drift from the code: its sink table and module map are checked here.

The design names every sink (type, its two classes, how it commits) in one table and every
floor of the layering in another; both are read back from the Markdown and compared with the
registries (`drainer.sinks.SINKS`, `spark_jobs.sinks.SPARK_SINKS`) and with `LAYERS`, which
`test_layering` enforces on the imports. A sink added, moved or renamed without the design
following fails here, as does a floor drawn in the design that the code does not keep.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_layering import LAYERS, ROOT

DESIGN = ROOT / "docs" / "design.md"
NAME = re.compile(r"`([^`]+)`")


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with `header`, cells stripped."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.replace(" ", "").startswith(header)), None
    )
    assert start is not None, f"docs/design.md has no table starting {header!r}"
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _code(cell: str) -> str:
    found = NAME.findall(cell)
    return found[0] if found else cell


def sink_table_mismatches(text: str) -> list[str]:
    """How the design's sink table (`| sink | driver side | Spark side | commit | ...`)
    disagrees with the two registries and the sinks' capabilities."""
    from drainer.sinks import SINKS
    from spark_jobs.sinks import SPARK_SINKS

    rows = {_code(r[0]): r for r in _table(text, "|sink|driverside|Sparkside|commit|")}
    problems = [f"sink {t!r} is registered but not in the design" for t in SINKS if t not in rows]
    problems += [f"sink {t!r} is in the design but not registered" for t in rows if t not in SINKS]
    for kind, row in rows.items():
        if kind not in SINKS:
            continue
        for cls, cell in ((SINKS[kind], row[1]), (SPARK_SINKS[kind], row[2])):
            named = f"{cls.__module__}.{cls.__qualname__}"
            if _code(cell) != named:
                problems.append(f"sink {kind!r}: the design says {_code(cell)}, the code {named}")
        if _code(row[3]) != SINKS[kind].capabilities.commit:
            problems.append(f"sink {kind!r}: commit {_code(row[3])!r} in the design")
    return problems


def _full(name: str) -> str:
    """A name as the module map writes it (`store`, `spark_jobs`) as LAYERS does."""
    return name if name in ("spark_jobs", "dagster_project") else f"drainer.{name}"


def module_map_mismatches(text: str) -> list[str]:
    """How the design's module map (`| floor | modules | owns |`, lowest first) disagrees with
    `LAYERS`, and which modules of drainer/ it leaves out."""
    drawn = [
        tuple(_full(n.rstrip("/")) for n in NAME.findall(row[1]))
        for row in _table(text, "|floor|modules|")
    ]
    kept = [tuple(p for p in floor if p != "drainer") for floor in LAYERS]
    problems = []
    for i in range(max(len(drawn), len(kept))):
        have = drawn[i] if i < len(drawn) else ()
        want = kept[i] if i < len(kept) else ()
        if sorted(have) != sorted(want):
            problems.append(
                f"floor {i}: the design draws {sorted(have)}, the code keeps {sorted(want)}"
            )
    named = {n for floor in drawn for n in floor}
    for path in sorted((ROOT / "drainer").iterdir()):
        if path.name.startswith(("_", ".")) or not (path.is_dir() or path.suffix == ".py"):
            continue
        if path.is_dir() and not (path / "__init__.py").exists():
            continue
        module = f"drainer.{path.stem}"
        if module not in named:
            problems.append(f"{module} is on no floor of the design's module map")
    return problems


def test_the_designs_sink_table_matches_the_registries():
    assert sink_table_mismatches(DESIGN.read_text()) == []


def test_the_designs_module_map_matches_the_layers():
    assert module_map_mismatches(DESIGN.read_text()) == []


def test_a_sink_missing_from_the_design_is_caught():
    text = DESIGN.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `delta` "))
    problems = sink_table_mismatches(text.replace(row + "\n", ""))
    assert problems == ["sink 'delta' is registered but not in the design"]


def test_a_moved_sink_class_is_caught():
    text = DESIGN.read_text()
    moved = text.replace("drainer.sinks.iceberg.IcebergSink`", "drainer.sinks.old.IcebergSink`")
    assert any("'iceberg'" in p for p in sink_table_mismatches(moved))


def test_a_floor_the_code_does_not_keep_is_caught():
    text = DESIGN.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    problems = module_map_mismatches(text.replace(row, row.replace("`store`", "`stores`")))
    assert problems and problems[0].startswith("floor 2:")


def test_a_package_left_off_the_map_is_caught(tmp_path: Path):
    text = DESIGN.read_text()
    row = next(line for line in text.splitlines() if "`offset_map`" in line and line[0] == "|")
    problems = module_map_mismatches(text.replace("`offset_map`", "offset map", 1))
    assert "drainer.offset_map is on no floor of the design's module map" in problems, row
