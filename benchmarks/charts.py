"""Charts from the results files the benchmarks write (`benchmarks/results/*.json`), as PNG
files under `benchmarks/charts/` that benchmarks/README.md shows (issue 51).

  .venv/bin/python benchmarks/charts.py          # `make bench` runs it after the benchmarks

- `sink-<sink>.png`, one per sink (kafka, postgres, delta, iceberg): wall time against records
  (10k, 100k, 1M, 10M: whichever sizes have results) for drainer (solid), the peers given
  drainer's settings (dashed), the peers on their defaults (dash-dot) and the limits (dotted).
- `phases.png`: where a drainer run's time goes (plan, Spark job, commit, mirror, ...), per
  sink, at the largest size with results.
- `partitions.png`: a whole `drainer run` of the same records against the partition count
  (`partitions.py`).

It draws whatever results exist, so a smoke run makes charts too; every chart's title carries
the date and commit of the results drawn, and says how many sizes it has.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CHARTS = HERE / "charts"
STYLE = {"drainer": "-", "tuned": "--", "default": "-.", "limit": ":"}
MARKER = {"drainer": "o", "tuned": "s", "default": "^", "limit": "x"}


def load(results: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


def sink_rows(files: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every row of the sink benchmarks by sink, each with its file's date and commit."""
    by_sink: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in files:
        if f.get("benchmark") not in ("kafka_sink", "lakehouse_sinks"):
            continue
        for row in f.get("rows", []):
            by_sink[row["sink"]].append({**row, "date": f["date"], "commit": f["commit"]})
    return by_sink


def stamp(rows: list[dict[str, Any]]) -> str:
    dates = sorted({r["date"][:10] for r in rows})
    commits = sorted({r["commit"] for r in rows})
    return f"{', '.join(dates)}, commit {', '.join(commits)}"


def sink_chart(plt: Any, sink: str, rows: list[dict[str, Any]], out: Path) -> Path:
    from matplotlib.ticker import NullLocator, ScalarFormatter

    fig, ax = plt.subplots(figsize=(10, 5))
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    kinds = {}
    for row in rows:
        lines[row["path"]].append((row["records"], row["wall_s"]))
        kinds[row["path"]] = row["kind"]
    order = sorted(lines, key=lambda n: (list(STYLE).index(kinds[n]), n))
    for name in order:
        points = sorted(lines[name])
        kind = kinds[name]
        ax.plot(
            [x for x, _ in points],
            [y for _, y in points],
            linestyle=STYLE.get(kind, "-"),
            marker=MARKER.get(kind, "o"),
            linewidth=2.5 if kind == "drainer" else 1.2,
            label=f"{name} ({kind})",
        )
    sizes = sorted({r["records"] for r in rows})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.set_xlabel("records")
    ax.set_ylabel("wall time (s), median")
    ax.set_title(f"sink {sink}: drainer, tuned and default peers, the limits\n{stamp(rows)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out / f"sink-{sink}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def phases_chart(plt: Any, by_sink: dict[str, list[dict[str, Any]]], out: Path) -> Path | None:
    """Per sink, drainer's phases at the largest size with results (stacked bars)."""
    bars = []
    for sink, rows in sorted(by_sink.items()):
        ours = [r for r in rows if r["path"] == sink or r["path"] == "drainer"]
        ours = [r for r in ours if r["kind"] == "drainer" and r.get("phases")]
        if ours:
            largest = max(ours, key=lambda r: r["records"])
            bars.append((f"{sink}\n{largest['records']:,}", largest["phases"], largest))
    if not bars:
        return None
    # `sink.<step>` phases are parts of `spark_job`: stacked, they would count twice
    names = list(dict.fromkeys(k for _, phases, _ in bars for k in phases if "." not in k))
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.8 * len(bars)))
    left = [0.0] * len(bars)
    for phase in names:
        widths = [phases.get(phase, 0.0) for _, phases, _ in bars]
        ax.barh([label for label, _, _ in bars], widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("seconds (medians per phase)")
    ax.set_title(f"where a drainer run's time goes\n{stamp([row for *_, row in bars])}")
    ax.legend(fontsize=7, ncol=min(len(names), 6), loc="lower right")
    fig.tight_layout()
    path = out / "phases.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def partitions_chart(plt: Any, files: list[dict[str, Any]], out: Path) -> Path | None:
    found = [f for f in files if f.get("benchmark") == "partitions"]
    if not found:
        return None
    latest = max(found, key=lambda f: f["date"])
    rows = sorted(latest["rows"], key=lambda r: r["partitions_total"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["partitions_total"] for r in rows]
    ax.plot(xs, [r["wall_s"] for r in rows], marker="o", label="drainer run (whole process)")
    if all("spark_job_s" in r for r in rows):
        ax.plot(xs, [r["spark_job_s"] for r in rows], marker="s", linestyle="--", label="Spark job")
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("partitions (levels x partitions per level)")
    ax.set_ylabel("seconds, median")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"{latest['records']:,} records by partition count\n{stamp([latest])}"
        if "date" in latest
        else "by partition count"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "partitions.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=CHARTS)
    args = parser.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("charts.py needs matplotlib: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    files = load(args.results)
    if not files:
        print(f"no results under {args.results}: run a benchmark first", file=sys.stderr)
        return 2
    args.out.mkdir(exist_ok=True)
    by_sink = sink_rows(files)
    drawn = [sink_chart(plt, sink, rows, args.out) for sink, rows in sorted(by_sink.items())]
    drawn += [p for p in (phases_chart(plt, by_sink, args.out),) if p]
    drawn += [p for p in (partitions_chart(plt, files, args.out),) if p]
    for path in drawn:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
