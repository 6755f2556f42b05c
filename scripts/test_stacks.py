"""Bring up the suite's two local stacks before `make test` starts its two parts side by side.

The `serial` tests kill, restart or rewind their stack's services (the Connect server, Postgres,
the broker), so they cannot share a stack with the tests that run on three workers. Run one
after the other, the suite took 33-34 minutes on 2 cores, the serial part 15 of them, mostly
waiting for kills and restarts. Here they get a stack of their own (another DRAINER_HOME and
ports, given in the environment of the serial part: the Makefile's SERIAL_ENV), so the two parts
run at the same time.

Both stacks are started here, with every format the suite loads (tests/support/drains.py), so
that no test's fixture restarts a Connect server or resolves jars while the other part runs;
and the serial home starts with a copy of the first one's jars (Spark's connector, Delta,
Iceberg, Avro, the broker's own), which it would otherwise resolve again.

    python scripts/test_stacks.py DRAINER_HOME=<path> DRAINER_KAFKA_PORT=<p> ...
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from drainer import services  # noqa: E402
from drainer.errors import DrainerError  # noqa: E402
from drainer.settings import load_settings  # noqa: E402
from tests.support.drains import STACK_FORMATS  # noqa: E402


def main(serial_env: list[str]) -> int:
    overrides = dict(item.split("=", 1) for item in serial_env)
    # as tests/conftest.py sets it: the Connect server restarts when its PYTHONPATH changes
    python_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in python_path:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *python_path])
    first = load_settings()
    if load_settings({**os.environ, **overrides}).home == first.home:
        print("test_stacks: the serial part needs a DRAINER_HOME of its own", file=sys.stderr)
        return 2
    try:
        print(f"the shared stack ({first.home})")
        services.up(first, formats=STACK_FORMATS)
        os.environ.update(overrides)  # what the serial stack's server and broker inherit
        serial = load_settings()
        if not (serial.home / "jars").exists():
            shutil.copytree(first.home / "jars", serial.home / "jars", symlinks=True)
        print(f"the serial part's stack ({serial.home})")
        services.up(serial, formats=STACK_FORMATS)
    except DrainerError as err:
        print(f"test_stacks: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
