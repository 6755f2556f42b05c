"""A real Dagster deployment for tests and benchmarks: `dagster-webserver` + `dagster-daemon`.

Both run as their own processes on a temporary DAGSTER_HOME (written by scripts/dagster_home.py,
as `make dagster` does, so Dagster's storage is in Postgres: a throwaway database of its own,
dropped at the end) and a free port, with the repository's workspace.yaml. Tests talk to it
the way the UI does: through the webserver's GraphQL endpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
BACKFILL_DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
# `dagster-daemon run` with the backfill daemon's loop shortened: Dagster loops it every
# DEFAULT_DAEMON_INTERVAL_SECONDS (30 s, no setting; read when the loop starts), so a backfill
# waits up to 30 s to become runs and up to 30 s more, after its runs end, to be seen done.
FAST_BACKFILL_DAEMON = """\
import sys
import dagster._daemon.controller as controller
assert hasattr(controller, "DEFAULT_DAEMON_INTERVAL_SECONDS"), "Dagster renamed the loop's constant"
controller.DEFAULT_DAEMON_INTERVAL_SECONDS = {seconds}
from dagster._daemon.cli import main
sys.exit(main())
"""
BACKFILL_LOOP_S = 2  # the tests' deployments


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class DagsterStack:
    home: Path
    env: dict[str, str] = field(repr=False)  # holds the database URL, password and all
    port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen] = field(default_factory=list)
    location: str = "dagster_project.definitions"
    storage_url: str = field(default="", repr=False)  # with its password: not in reports
    stock: bool = False
    """No dagster.yaml at all: Dagster's defaults (SQLite, no pool limits), as a new user has."""
    repository: str = "__repository__"
    backfill_loop_s: int | None = None
    """Seconds between the backfill daemon's loops; None: Dagster's own 30 s (benchmarks time
    that path as users have it). The tests use 2: the same daemon, the same backfill runs and
    the same completion, seen seconds after the launch and the runs' end rather than ~30 s."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180) -> DagsterStack:
        sys.path.insert(0, str(REPO / "scripts"))
        from dagster_home import storage_env, write_dagster_yaml
        from dagster_home import storage_url as dagster_storage_url
        from sqlalchemy.engine import make_url

        from drainer.store.server import ensure_database

        self.home.mkdir(parents=True, exist_ok=True)
        if not self.stock:
            # the URL `make dagster` would use, with a database of this stack's own
            url = make_url(dagster_storage_url())
            url = url.set(database=f"{url.database}_test_{uuid.uuid4().hex[:8]}")
            self.storage_url = url.render_as_string(hide_password=False)
            ensure_database(url)
            write_dagster_yaml(self.home, self.storage_url)
        env = {**self.env, "DAGSTER_HOME": str(self.home)}
        if self.storage_url:  # as `make dagster` runs it: the password in the environment
            env.update(storage_env(self.storage_url))
        logs = self.home / "stack_logs"
        logs.mkdir(exist_ok=True)
        # create the storage's tables once, before the webserver and the daemon both try
        subprocess.run(
            [str(BIN / "dagster"), "instance", "migrate"],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        for name, cmd in (
            (
                "webserver",
                [BIN / "dagster-webserver", "-w", "workspace.yaml", "-h", "127.0.0.1"]
                + ["-p", str(self.port)],
            ),
            ("daemon", [*self._daemon_command(), "run", "-w", "workspace.yaml"]),
        ):
            out = (logs / f"{name}.log").open("ab")
            # a session of its own: stop() ends the process with everything it started
            self.procs.append(
                subprocess.Popen(
                    [str(c) for c in cmd],
                    cwd=REPO,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        self.wait_loaded(timeout_s)
        return self

    def _daemon_command(self) -> list[str | Path]:
        if self.backfill_loop_s is None:
            return [BIN / "dagster-daemon"]
        code = FAST_BACKFILL_DAEMON.format(seconds=int(self.backfill_loop_s))
        return [sys.executable, "-c", code]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for proc in self.procs:  # run workers and code servers live in the same sessions
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()  # stopped: a second stop() (the fixture's, at the end) does nothing
        if self.storage_url:
            from sqlalchemy.engine import make_url

            from drainer.store.server import drop_database

            drop_database(make_url(self.storage_url))
            self.storage_url = ""

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted((self.home / "stack_logs").glob("*.log"))
        )

    # ------------------------------------------------------------------ GraphQL

    def gql(self, query: str, **variables: Any) -> dict:
        reply = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables}, timeout=60
        )
        reply.raise_for_status()
        body = reply.json()
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def wait_loaded(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            for proc in self.procs:
                assert proc.poll() is None, f"a Dagster process ended:\n{self.logs()}"
            try:
                data = self.gql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
                    "locationOrLoadError { __typename ... on PythonError { message } } } } } }"
                )
                entries = data["workspaceOrError"]["locationEntries"]
                last = entries
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    loaded = entries[0]["locationOrLoadError"]
                    assert loaded["__typename"] == "RepositoryLocation", loaded
                    self.location = entries[0]["name"]
                    return
            except requests.RequestException as err:
                last = err
            time.sleep(1)
        raise TimeoutError(f"Dagster did not load the workspace: {last}\n{self.logs()}")

    def launch_backfill(self, asset: str, partitions: list[str] | None = None) -> str:
        """What the UI's "Materialize" dialog sends for a selection of partitions."""
        params: dict[str, Any] = {"assetSelection": [{"path": [asset]}]}
        if partitions is None:
            params["allPartitions"] = True
        else:
            params["partitionNames"] = partitions
        data = self.gql(
            "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) "
            "{ __typename ... on LaunchBackfillSuccess { backfillId } "
            "... on PythonError { message stack } ... on InvalidStepError { invalidStepKey } "
            "... on UnauthorizedError { message } } }",
            p=params,
        )["launchPartitionBackfill"]
        assert data["__typename"] == "LaunchBackfillSuccess", data
        return data["backfillId"]

    def launch_run(self, asset: str, tags: dict[str, str]) -> str:
        """What the UI's "Materialize" sends for one run of an asset: a single partition
        (`dagster/partition`) or a partition range (`dagster/asset_partition_range_*`)."""
        return self._launch(
            {"pipelineName": "__ASSET_JOB", "assetSelection": [{"path": [asset]}]},
            {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
        )

    def launch_job(self, job: str) -> str:
        """What the UI's Launchpad sends for a job without config (e.g. a maintenance job)."""
        return self._launch({"pipelineName": job}, {})

    def _launch(self, selector: dict[str, Any], metadata: dict[str, Any]) -> str:
        params = {
            "mode": "default",
            "runConfigData": "{}",
            "selector": {
                "repositoryLocationName": self.location,
                "repositoryName": self.repository,
                **selector,
            },
            "executionMetadata": metadata,
        }
        data = self.gql(
            "mutation($p: ExecutionParams!) { launchPipelineExecution(executionParams: $p) "
            "{ __typename ... on LaunchRunSuccess { run { runId } } "
            "... on PythonError { message stack } ... on RunConfigValidationInvalid { errors "
            "{ message } } ... on InvalidSubsetError { message } } }",
            p=params,
        )["launchPipelineExecution"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def run_messages(self, run_id: str) -> list[str]:
        """The messages of a run's event log, as the run's page in the UI lists them."""
        found = self.gql(
            "query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { "
            "events { ... on MessageEvent { message } } } } }",
            id=run_id,
        )["logsForRun"]
        return [e["message"] for e in found.get("events") or [] if e.get("message")]

    def observations(self, asset: str) -> list[dict[str, Any]]:
        """The asset's observations' metadata (numbers and texts), newest first."""
        data = self.gql(
            "query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset { "
            "assetObservations(limit: 100) { runId metadataEntries { label "
            "... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } } } } } }",
            k={"path": [asset]},
        )["assetOrError"]
        return [
            {
                "runId": o["runId"],
                **{e["label"]: e.get("intValue", e.get("text")) for e in o["metadataEntries"]},
            }
            for o in data["assetObservations"]
        ]

    def _poll(self, look: Callable[[], tuple[bool, Any]], timeout_s: float, every_s: float) -> Any:
        """Call `look` until it says done (returns (True, value)); its last value names a timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            done, value = look()
            if done:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"still waiting: {value}\n{self.logs()}")
            time.sleep(every_s)

    def wait_run(self, run_id: str, timeout_s: float = 600) -> dict:
        def look() -> tuple[bool, dict]:
            run = self.gql(
                "query($id: ID!) { runOrError(runId: $id) { ... on Run { runId status "
                "startTime endTime creationTime } } }",
                id=run_id,
            )["runOrError"]
            return run["status"] in TERMINAL, run

        return self._poll(look, timeout_s, every_s=0.2)

    def runs(self, tags: dict[str, str]) -> list[dict]:
        data = self.gql(
            "query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results { runId "
            "status startTime endTime creationTime tags { key value } } } } }",
            f={"tags": [{"key": k, "value": v} for k, v in tags.items()]},
        )
        results = data["runsOrError"]["results"]
        for run in results:
            run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        return results

    def wait_backfill(self, backfill_id: str, timeout_s: float = 600) -> list[dict]:
        """Wait until the backfill is done and all its runs ended; returns the runs."""

        def look() -> tuple[bool, Any]:
            status = self.gql(
                "query($id: String!) { partitionBackfillOrError(backfillId: $id) "
                "{ ... on PartitionBackfill { status } } }",
                id=backfill_id,
            )["partitionBackfillOrError"]["status"]
            runs = self.runs({"dagster/backfill": backfill_id})
            ended = runs and all(r["status"] in TERMINAL for r in runs)
            return bool(status in BACKFILL_DONE and ended), runs if ended else status

        return self._poll(look, timeout_s, every_s=0.5)

    def wait_runs(self, tags: dict[str, str], count: int = 1, timeout_s: float = 600) -> list[dict]:
        def look() -> tuple[bool, list[dict]]:
            runs = self.runs(tags)
            return len(runs) >= count and all(r["status"] in TERMINAL for r in runs), runs

        return self._poll(look, timeout_s, every_s=0.5)

    def materializations(self, asset: str) -> list[dict]:
        """Every materialization of the asset: partition, run id and metadata as numbers."""
        data = self.gql(
            "query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset { "
            "assetMaterializations(limit: 1000) { partition runId metadataEntries { label "
            "... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } "
            "... on BoolMetadataEntry { boolValue } ... on TextMetadataEntry { text } } } } } }",
            k={"path": [asset]},
        )["assetOrError"]
        found = []
        for m in data["assetMaterializations"]:
            values = {}
            for entry in m["metadataEntries"]:
                values[entry["label"]] = next(
                    (
                        entry[k]
                        for k in ("intValue", "floatValue", "boolValue", "text")
                        if k in entry
                    ),
                    None,
                )
            found.append({"partition": m["partition"], "runId": m["runId"], "metadata": values})
        return found

    def freshness(self, asset: str) -> tuple[dict | None, str | None]:
        """(the asset's freshness policy, its freshness status as the UI shows it: HEALTHY,
        WARNING, DEGRADED or UNKNOWN), from the state the freshness daemon last stored."""
        node = self.gql(
            "query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode { "
            "internalFreshnessPolicy { __typename ... on TimeWindowFreshnessPolicy { "
            "failWindowSeconds warnWindowSeconds } } freshnessStatusInfo { freshnessStatus } } } }",
            k={"path": [asset]},
        )["assetNodeOrError"]
        status = node["freshnessStatusInfo"]
        return node["internalFreshnessPolicy"], status["freshnessStatus"] if status else None

    def wait_freshness(self, asset: str, status: str, timeout_s: float = 180) -> None:
        def look() -> tuple[bool, Any]:
            seen = self.freshness(asset)[1]
            return seen == status, f"{asset}'s freshness is {seen}, not {status}"

        self._poll(look, timeout_s, every_s=1)

    def _selector(self, kind: str, name: str) -> dict[str, str]:
        return {
            "repositoryName": self.repository,
            "repositoryLocationName": self.location,
            f"{kind}Name": name,
        }

    def start_sensor(self, name: str) -> None:
        data = self.gql(
            "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename "
            "... on PythonError { message } } }",
            s=self._selector("sensor", name),
        )["startSensor"]
        assert data["__typename"] == "Sensor", data

    def stop_sensor(self, name: str) -> None:
        sensor = self.gql(
            "query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor "
            "{ id } } }",
            s=self._selector("sensor", name),
        )["sensorOrError"]
        data = self.gql(
            "mutation($id: String!) { stopSensor(id: $id) { __typename } }",
            id=sensor["id"],
        )["stopSensor"]
        assert data["__typename"] == "StopSensorMutationResult", data

    def stop_schedule(self, name: str) -> None:
        schedule = self.gql(
            "query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) { ... on "
            "Schedule { id } } }",
            s=self._selector("schedule", name),
        )["scheduleOrError"]
        data = self.gql(
            "mutation($id: String!) { stopRunningSchedule(id: $id) { __typename "
            "... on PythonError { message } } }",
            id=schedule["id"],
        )["stopRunningSchedule"]
        assert data["__typename"] == "ScheduleStateResult", data
