"""Delete the topics that benchmarks of earlier drainer versions left on the broker.

    .venv/bin/python benchmarks/delete_leftover_topics.py [--dry-run] [--prefix bench]

Benchmarks now delete their topics when they end (`common.delete_at_exit`); before that, each
run left its source and output topics behind (here: 529 topics, 2,100 partitions, 6 GB), which
the broker loads at every start. Only topics whose name starts with `--prefix` (the
benchmarks' own, `bench`) are deleted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--prefix", default="bench", help="delete topics named PREFIX_* or PREFIX-*"
    )
    parser.add_argument("--dry-run", action="store_true", help="list them, delete nothing")
    args = parser.parse_args()

    from confluent_kafka.admin import AdminClient

    from drainer.settings import load_settings

    admin = AdminClient({"bootstrap.servers": load_settings().bootstrap_servers})
    names = sorted(
        t
        for t in admin.list_topics(timeout=30).topics
        if t.startswith((f"{args.prefix}_", f"{args.prefix}-"))
    )
    print(f"{len(names)} topics named {args.prefix}_* or {args.prefix}-*")
    if args.dry_run or not names:
        print("\n".join(names))
        return 0
    failed = 0
    for start in range(0, len(names), 100):  # the broker takes a batch per request
        for name, future in admin.delete_topics(
            names[start : start + 100], operation_timeout=30
        ).items():
            try:
                future.result(timeout=60)
            except Exception as err:  # already gone, say: the rest still go
                failed += 1
                print(f"{name}: {err}")
    print(f"deleted {len(names) - failed} topics")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
