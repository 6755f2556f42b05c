"""A real Airflow for tests: API server, scheduler and DAG processor, driven through `/api/v2`.

Started as `make airflow` starts it (scripts/airflow_home.py: the same variables, the metadata
in Postgres), on a temporary AIRFLOW_HOME, a free port, a throwaway metadata database dropped at
the end and a dags folder of the test's own. Tests talk to it the way the UI does: the REST API.
"""

from __future__ import annotations

import contextlib
import os
import signal
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
DONE = {"success", "failed"}


def _log_line(event: Any) -> str:
    """One event of a structured task log as the UI prints it: its text, and a failure's
    exception as `Type: message`."""
    if not isinstance(event, dict):
        return str(event)
    line = str(event.get("event", ""))
    for error in event.get("error_detail") or []:
        line += f"\n{error.get('exc_type')}: {error.get('exc_value')}"
    return line


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class AirflowStack:
    home: Path
    dags_folder: Path
    env: dict[str, str] = field(repr=False)
    port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    metadata_url: str = field(default="", repr=False)  # with its password: not in reports

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v2"

    def start(self, timeout_s: float = 240) -> AirflowStack:
        sys.path.insert(0, str(REPO / "scripts"))
        import airflow_home
        from sqlalchemy.engine import make_url

        from drainer.store.server import ensure_database

        url = make_url(airflow_home.metadata_url())
        url = url.set(database=f"{url.database}_test_{uuid.uuid4().hex[:8]}")
        self.metadata_url = url.render_as_string(hide_password=False)
        ensure_database(url)
        env = {
            **self.env,
            **airflow_home.airflow_env(self.home, self.port, self.metadata_url, self.dags_folder),
            # the scheduler's log server: a port of its own (8793 may be `make airflow`'s)
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        }
        self.home.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
        logs = self.home / "stack_logs"
        logs.mkdir(exist_ok=True)
        self.procs = airflow_home.start(env, logs)
        self._wait_up(timeout_s)
        return self

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
        for proc in self.procs:  # the executor's workers live in the scheduler's session
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()
        if self.metadata_url:
            from sqlalchemy.engine import make_url

            from drainer.store.server import drop_database

            with contextlib.suppress(Exception):  # a task process may still hold a connection
                drop_database(make_url(self.metadata_url))
            self.metadata_url = ""

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted((self.home / "stack_logs").glob("*.log"))
        )

    # ------------------------------------------------------------------ REST API

    def get(self, path: str, **params: Any) -> Any:
        reply = requests.get(f"{self.api}{path}", params=params, timeout=60)
        assert reply.ok, f"GET {path}: {reply.status_code} {reply.text[:2000]}"
        return reply.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        reply = requests.post(f"{self.api}{path}", json=body, timeout=60)
        assert reply.ok, f"POST {path}: {reply.status_code} {reply.text[:2000]}"
        return reply.json()

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        reply = requests.patch(f"{self.api}{path}", json=body, timeout=60)
        assert reply.ok, f"PATCH {path}: {reply.status_code} {reply.text[:2000]}"
        return reply.json()

    def _wait_up(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            for proc in self.procs:
                assert proc.poll() is None, f"an Airflow process ended:\n{self.logs()}"
            with contextlib.suppress(requests.RequestException):
                last = requests.get(f"{self.api}/monitor/health", timeout=5).json()
                if last["scheduler"]["status"] == "healthy":
                    return
            time.sleep(1)
        raise TimeoutError(f"Airflow did not come up: {last}\n{self.logs()}")

    def poll(
        self, look: Callable[[], tuple[bool, Any]], timeout_s: float, every_s: float = 1
    ) -> Any:
        """Call `look` until it says done (returns (True, value)); its last value names a timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            done, value = look()
            if done:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"still waiting: {value}\n{self.logs()}")
            time.sleep(every_s)

    def wait_dags(self, dag_ids: list[str], timeout_s: float = 180) -> None:
        """Until the DAG processor has parsed every one of `dag_ids`."""

        def look() -> tuple[bool, Any]:
            found = {d["dag_id"] for d in self.get("/dags", limit=100)["dags"]}
            return set(dag_ids) <= found, sorted(found)

        self.poll(look, timeout_s)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """What the UI's "Trigger DAG" sends; returns the DAG run's id."""
        run = self.post(f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/dags/{dag_id}/dagRuns", limit=100)["dag_runs"])

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float = 420) -> dict[str, Any]:
        def look() -> tuple[bool, Any]:
            run = self.get(f"/dags/{dag_id}/dagRuns/{run_id}")
            return run["state"] in DONE, run

        return dict(self.poll(look, timeout_s))

    def task(self, dag_id: str, run_id: str, task_id: str = "drain") -> dict[str, Any]:
        return dict(self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"))

    def xcom(self, dag_id: str, run_id: str, task_id: str = "drain") -> Any:
        entry = self.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
            deserialize=True,
        )
        return entry["value"]

    def task_log(self, dag_id: str, run_id: str, try_number: int, task_id: str = "drain") -> str:
        """The task's log as the UI's log view reads it."""
        body = self.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            full_content=True,
        )
        content = body["content"]
        if isinstance(content, str):
            return content
        return "\n".join(_log_line(event) for event in content)
