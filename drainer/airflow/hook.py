"""`DrainerHook`: a run's drainer settings from an Airflow connection and the environment.

The orchestrator's edge, as DrainerResource is Dagster's: it builds the `Settings` once and the
operators hand them down (nothing below calls `load_settings()` for them). A connection of type
`drainer` (id `drainer_default` unless told otherwise) names drainer's Postgres in its host,
port, login, password and schema, and the other services in its extra
(`kafka_bootstrap_servers`, `spark_remote`, `spark_master`, `drains_file`, `warehouse`); what it
leaves out comes from drainer's own variables. Without such a connection the environment alone
decides. The password stays in Airflow's connection store and its masker: the hook logs no
setting, and drainer redacts URLs in the lines it logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from drainer.airflow.values import EXTRA_VARIABLES, connection_variables
from drainer.settings import Settings, settings_with


class DrainerHook(BaseHook):
    """drainer's settings for a run: connection `drainer_conn_id` over the environment."""

    conn_name_attr = "drainer_conn_id"
    default_conn_name = "drainer_default"
    conn_type = "drainer"
    hook_name = "drainer"

    def __init__(
        self, drainer_conn_id: str = default_conn_name, drains_file: str | Path | None = None
    ) -> None:
        super().__init__()
        self.drainer_conn_id = drainer_conn_id
        self.drains_file = drains_file
        self.secrets: list[str] = []  # the connection's password and the URL holding it

    def variables(self) -> dict[str, str]:
        """drainer's variables the connection sets ({} when it does not exist)."""
        try:
            conn = self.get_connection(self.drainer_conn_id)
        except AirflowNotFoundException:
            return {}
        found = connection_variables(
            self.drainer_conn_id,
            host=conn.host,
            port=conn.port,
            login=conn.login,
            password=conn.password,
            schema=conn.schema,
            extra=conn.extra_dejson,
        )
        url = found.get("DRAINER_DATABASE_URL")
        for secret in (conn.password, url if url and conn.password else None):
            if secret:
                mask_secret(secret)  # Airflow's masker: the task log and the supervisor's
                self.secrets.append(secret)
        return found

    def settings(self) -> Settings:
        """The run's settings: the connection's variables over the environment's; an explicit
        `drains_file` over both."""
        found = self.variables()
        if self.drains_file is not None:
            found["DRAINER_CONFIG"] = str(Path(self.drains_file).expanduser().resolve())
        return settings_with(found)

    def get_conn(self) -> Settings:
        return self.settings()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: the Postgres fields as drainer's database, the rest as extra."""
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database", "host": "Postgres host"},
            "placeholders": {
                "host": "127.0.0.1",
                "port": "5432",
                "schema": "drainer",
                "extra": '{"kafka_bootstrap_servers": "broker:9092", '
                '"spark_remote": "sc://spark:15002"}',
            },
        }


def environment_settings(drains_file: str | Path | None = None) -> Settings:
    """Settings from the environment alone, for what a DAG file needs while it is parsed (the
    drains and their sinks' names): parsing reads no connection."""
    path = None if drains_file is None else str(Path(drains_file).expanduser().resolve())
    return settings_with({"DRAINER_CONFIG": path})  # None: the environment's own


__all__ = ["EXTRA_VARIABLES", "DrainerHook", "environment_settings"]
