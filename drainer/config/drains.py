"""The drains file (docs/configuration.md): what each drain reads, how it shares its budget, where it writes.

Every invalid setting fails at load time with the setting's path and how to fix it, so a typo
never surfaces halfway through a run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import yaml
from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from drainer.allocation import reserved_shares
from drainer.config.formats import METADATA_COLUMNS, RecordFormat, check_schema_files
from drainer.config.kafka_clients import check_blocks
from drainer.config.keys import KnownKeys
from drainer.config.metadata import check_metadata, run_metadata
from drainer.config.sink_models import SINK_MODELS, SinkConfig
from drainer.config.units import duration_ms, size_bytes
from drainer.errors import ConfigError
from drainer.level_topics import level_topic
from drainer.processing.callables import check_import_path

if TYPE_CHECKING:  # the store's row, imported with SQLAlchemy only when a run asks for it
    from drainer.store.leases import DrainRow

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Kafka's legal topic characters, minus '-' (our level separator)
_TOPIC = re.compile(r"^[A-Za-z0-9._]+$")


class DrainConfig(KnownKeys):
    """One drain: a logical topic with N priority levels, drained in budgeted runs."""

    model_config = ConfigDict(extra="forbid")
    WHERE: ClassVar[str] = "the drain"

    name: str = Field(description="the drain's name: the key under `drains:` (set for you)")
    topic: str = Field(description="logical topic; level i lives in the Kafka topic `<topic>-<i>`")
    group: str = Field(
        description="logical consumer group; level i's progress is mirrored to `<group>-<i>`"
    )
    levels: int = Field(
        ge=1, le=16, description="number of priority levels N; level N-1 is the most urgent"
    )
    partitions: int = Field(
        default=4, ge=1, description="partitions per level topic, for `drainer topics create`"
    )
    replication_factor: int = Field(
        default=1, ge=1, description="replication factor, for `drainer topics create`"
    )
    budget: int = Field(ge=1, description="most records one run drains, across its levels")
    distributor: str | list[float] = Field(
        default="exponential",
        description="how the budget is split into reserved shares: `exponential` (2^i), "
        "`linear` (i+1), `equal`, a list of weights per level, or "
        "'package.module:function' returning weights",
    )
    history_window: int = Field(
        default=6, ge=1, description="how many recent runs burst decisions look at"
    )
    history_days: int = Field(
        default=30,
        ge=1,
        description="days of run detail kept (runs, their levels and ranges, retention "
        "losses, dead letters already published or retried, attempts of done records); "
        "older runs are pruned to per-day totals by upkeep after a commit (hourly) and by "
        "`drainer maintain`, never the open plan nor the last `history_window` runs",
    )
    maxout_threshold: int = Field(
        default=4,
        ge=1,
        description="a level may burst after filling its reserved share in this many runs "
        "of the window",
    )
    backlog_aware: bool = Field(
        default=True,
        description="offer budget a level cannot use to the levels with records waiting, "
        "highest first; `false` keeps the plain reserved-share-plus-burst rule",
    )
    max_gap_seconds: float | None = Field(
        default=None,
        gt=0,
        description="event-time alignment: a partition waits while its next record is more "
        "than this many seconds ahead of the partitions behind it; null turns it off",
    )
    align: Literal["level", "drain"] = Field(
        default="level",
        description=(
            "what event-time alignment (max_gap_seconds) keeps together: each level's "
            "partitions (`level`), so no level waits for another level's older records, or all "
            "partitions of the drain (`drain`)"
        ),
    )
    max_wait: str | float | dict[int, str | float] | None = Field(
        default=None,
        description="longest a record may wait: a level whose records are older than this "
        "(by their Kafka timestamp) gets, before any burst, enough of the budget to drain "
        "them, the highest level first when they exceed the budget; one duration for every "
        "level (`1h`) or one per level (`{0: 1h, 1: 15m}`, levels not named have none); "
        "durations as 90s, 15m, 1h, 2d; null turns it off",
    )
    run_seconds: float | None = Field(
        default=None,
        gt=0,
        description="time-boxed runs: aim for runs that finish in this many seconds; each "
        "run's record budget is the median of what the drain's recent committed runs drained per second "
        "of their whole slot (`runs.slot_s`: from the lease through plan, Spark, commit, "
        "mirror and upkeep; process start and the wait for the lease are outside it) times "
        "this, at most `budget` (the cap) and at least the distributor's minimum; a run that "
        "overshot lowers the next estimate; the first runs use `budget`; null turns it off",
    )
    budget_bytes: int | None = Field(
        default=None,
        description="a per-run byte budget besides `budget` (records): key+value+header bytes, "
        "estimated per partition from the record sizes of recent runs (or a sample read from "
        "Kafka when none is known), shared over the levels in proportion to their reserved "
        "shares, so a level of large records cannot fill a run meant for small ones; sizes "
        "as 100KB, 512MiB, 1GB (KB = 1000 bytes, KiB = 1024); null turns it off",
    )
    measure_bytes: bool | None = Field(
        default=None,
        description="count each run's key+value+header bytes per level (`drainer status`, "
        "run metadata, byte rates): true, false, or null to count them only where the drain "
        "plans with them (`budget_bytes`, `run_seconds`); counting them costs a copy of each "
        "record in the run's Spark job (~10% of a large append)",
    )
    schedule: str | None = Field(
        default="*/5 * * * *",
        description="Dagster cron schedule launching one run over all levels; null for none",
    )
    lag_threshold: int | None = Field(
        default=None,
        ge=1,
        description="backlog that makes the lag sensor request a run (default: budget)",
    )
    lag_sla: int | None = Field(
        default=None,
        ge=0,
        description="backlog above which the lag asset check fails (default: 10 x budget)",
    )
    mode: Literal["dataframe", "record"] = Field(
        default="dataframe",
        description="`dataframe`: `processor` transforms the run's records as one DataFrame; "
        "`record`: `handler` is called per record inside the Spark tasks",
    )
    processor: str | None = Field(
        default=None,
        description="dataframe mode: 'package.module:function', `transform(df) -> df`, given "
        "the decoded records (`value` declared) or the raw ones; none: one row per record, "
        "the value's fields (or the raw value) plus the reserved metadata columns",
    )
    value: RecordFormat | None = Field(
        default=None,
        description="dataframe mode: the values' declared format, decoded in Spark into typed "
        "columns (see `value.*`); none: the value stays bytes",
    )
    key: RecordFormat | None = Field(
        default=None,
        description="the keys' format in the `_key` column: `string`, `bytes` (the default), "
        "or `json`, `avro`, `protobuf` decoded like `value` into a struct (see `key.*`)",
    )
    metadata_columns: list[str] | None = Field(
        default=None,
        description="the metadata columns the sink writes, of `_topic`, `_partition`, "
        "`_offset`, `_timestamp`, `_level`, `_key`, `_headers`; default all seven, `[]` none. "
        "A record's coordinates (and an upsert's `_level`) are still read for errors, dead "
        "letters and ties; the other columns left out are not computed",
    )
    bad_records: Literal["fail", "dead_letter"] = Field(
        default="fail",
        description="a record whose value does not decode: `fail` stops the run naming its "
        "topic, partition and offset (nothing committed); `dead_letter` writes it to the "
        "drain's dead letters with the reason and its raw bytes, and the run goes on",
    )
    handler: str | None = Field(
        default=None,
        description="record mode: 'package.module:function', `handle(record) -> rows | None`",
    )
    output_schema: str | None = Field(
        default=None,
        description="record mode: the handler rows' columns as a Spark DDL string, e.g. "
        "'topic string, partition int, offset long'",
    )
    ordering: Literal["partition", "key", "unordered"] = Field(
        default="partition",
        description="record mode: offset order per partition, per key, or none",
    )
    max_concurrency: int = Field(
        default=16,
        ge=1,
        le=10_000,
        description="record mode: handler calls in flight at once per Spark task",
    )
    max_attempts: int = Field(
        default=3,
        ge=1,
        description="record mode: failed attempts after which a record is dead-lettered",
    )
    dlq_topic: str | None = Field(
        default=None,
        description="record mode: Kafka topic that dead letters are also published to",
    )
    sink: SinkConfig = Field(description="where the output goes (see `sink.*`)")
    kafka: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,  # may hold secrets
        description="common Kafka client settings, translated for both clients: "
        "security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location "
        "(PEM), ssl.certificate.location and ssl.key.location (PEM, mutual TLS), "
        "ssl.key.password, ssl.endpoint.identification.algorithm, client.id; values may "
        "reference environment variables as ${NAME}",
    )
    kafka_librdkafka: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,
        description="extra settings for librdkafka only (planning, producing, mirroring), in "
        "librdkafka's names; checked by librdkafka at load time; ${NAME} allowed",
    )
    kafka_java: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,
        description="extra settings for Spark's Java Kafka client only, without the `kafka.` "
        "prefix (e.g. sasl.jaas.config for other SASL mechanisms); ${NAME} allowed",
    )

    @field_validator("name", "group")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use letters, digits and underscores only")
        return value

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        if not _TOPIC.match(value):
            raise ValueError(
                "use letters, digits, '.' and '_' only: '-' separates the level suffix"
            )
        return value

    @field_validator("processor", "handler")
    @classmethod
    def _import_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else check_import_path(value, str(info.field_name))

    @field_validator("budget_bytes", mode="before")
    @classmethod
    def _budget_bytes(cls, value: object) -> object:
        return value if value is None else size_bytes(value)

    @field_validator("max_wait")
    @classmethod
    def _max_wait(cls, value: object) -> object:
        for duration in value.values() if isinstance(value, dict) else [value]:
            if duration is not None:
                duration_ms(duration)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DrainConfig:
        if self.maxout_threshold > self.history_window:
            raise ValueError(
                f"maxout_threshold ({self.maxout_threshold}) exceeds history_window "
                f"({self.history_window}); no level could ever burst: lower it"
            )
        if self.mode == "record" and not self.handler:
            raise ValueError("mode 'record' needs `handler: package.module:function`")
        if self.mode == "record" and not self.output_schema:
            raise ValueError(
                "mode 'record' needs `output_schema`, a Spark DDL string such as "
                "'topic string, partition int, offset long'"
            )
        check_blocks(self.kafka, self.kafka_librdkafka, self.kafka_java)
        self._check_formats()
        self._cdc_defaults()
        check_metadata(self)
        if isinstance(self.max_wait, dict):
            unknown = sorted(level for level in self.max_wait if not 0 <= level < self.levels)
            if unknown:
                raise ValueError(
                    f"max_wait names levels {unknown}, but the drain has levels 0.."
                    f"{self.levels - 1}: name only existing levels"
                )
        # reserved shares must give every level at least one record: checked by the allocator
        reserved_shares(self.levels, self.budget, self.distributor)
        return self

    def _cdc_defaults(self) -> None:
        """Debezium's events into a state table: newer by the source's commit time and log
        position, a delete when `op = d` (set only where the drains file says nothing)."""
        if self.value is None or self.value.envelope != "debezium":
            return
        sink: Any = self.sink
        if getattr(sink, "write", "append") != "upsert":
            return
        if sink.order_by is None:
            sink.order_by = ["_source_ts_ms", "_source_lsn"]
        if sink.delete_when is None:
            sink.delete_when = "_op = 'd'"

    def _check_formats(self) -> None:
        if self.mode == "record" and getattr(self.sink, "write", "append") == "upsert":
            raise ValueError(
                "sink.write 'upsert' takes dataframe mode (its rows are collapsed per key in one "
                "Spark job): use mode 'dataframe', or `write: append`"
            )
        if self.mode == "record" and self.value is not None:
            raise ValueError(
                "`value` declares a format for dataframe mode; record mode's handler gets the "
                "raw record: drop `value`, or use mode 'dataframe'"
            )
        raw_key = self.key is None or self.key.format in ("string", "bytes")
        if self.mode == "record" and not raw_key:
            raise ValueError(
                "record mode's handler gets the raw key: `key.format` may be `string` or "
                "`bytes` there, or use mode 'dataframe'"
            )
        for fmt in (self.value, self.key):
            if fmt is not None:
                check_schema_files(fmt, Path.cwd())

    def metadata(self) -> tuple[str, ...]:
        """The metadata columns the decoded rows carry, in their fixed order: those the sink
        writes, plus what the run itself reads (`run_metadata`)."""
        carried = set(self.written_metadata()) | set(run_metadata(self.sink))
        return tuple(c for c in METADATA_COLUMNS if c in carried)

    def written_metadata(self) -> tuple[str, ...]:
        """The metadata columns the sink writes (`metadata_columns`), in their fixed order."""
        chosen = METADATA_COLUMNS if self.metadata_columns is None else self.metadata_columns
        return tuple(c for c in METADATA_COLUMNS if c in set(chosen))

    def unwritten_metadata(self) -> tuple[str, ...]:
        """The metadata columns the rows carry for the run alone: dropped before the write
        (after an upsert's collapse, whose ties they break)."""
        written = set(self.written_metadata())
        return tuple(c for c in self.metadata() if c not in written)

    def level_topic(self, level: int) -> str:
        return level_topic(self.topic, level)

    def row(self) -> DrainRow:
        """The drain as the store's `drains` table keeps it (name, topic, group, levels)."""
        from drainer.store.leases import DrainRow

        return DrainRow(self.name, self.topic, self.group, self.levels)

    def level_group(self, level: int) -> str:
        return f"{self.group}-{level}"

    def check_level(self, level: int) -> int:
        """An unknown level is the caller's mistake; say which levels exist."""
        if not 0 <= level < self.levels:
            raise ConfigError(
                f"drain '{self.name}' has levels 0..{self.levels - 1}; level {level} does not "
                f"exist (topic {self.topic} has {self.levels} levels, highest = most urgent)"
            )
        return level

    @property
    def max_gap_ms(self) -> int | None:
        return None if self.max_gap_seconds is None else int(self.max_gap_seconds * 1000)

    @property
    def max_wait_ms(self) -> dict[int, int] | None:
        """`max_wait` per level, in ms (levels without one are absent); None when not set."""
        if self.max_wait is None:
            return None
        if isinstance(self.max_wait, dict):
            return {level: duration_ms(value) for level, value in self.max_wait.items()}
        return dict.fromkeys(range(self.levels), duration_ms(self.max_wait))


class DrainsFile(KnownKeys):
    model_config = ConfigDict(extra="forbid")
    WHERE: ClassVar[str] = "the drains file"

    drains: dict[str, DrainConfig]


def load_drains(path: Path | str) -> dict[str, DrainConfig]:
    """Read and validate the drains file (`Settings.config_path`, or a file of the caller's);
    ConfigError names the bad setting."""
    path, raw = _read(path)
    return _validate(path, raw)


def selected_drains(path: Path | str, select: Iterable[str] | None) -> dict[str, DrainConfig]:
    """The drains of the file at `path`, only those `select` names when given (an orchestrator
    rendering part of a drains file); a name the file lacks is a ConfigError naming it."""
    drains = load_drains(path)
    if select is None:
        return drains
    unknown = sorted(set(select) - set(drains))
    if unknown:
        raise ConfigError(
            f"select names drains {unknown} that {path} does not define (it has: "
            f"{', '.join(sorted(drains)) or 'none'}): fix the names or the drains file"
        )
    return {name: drain for name, drain in drains.items() if name in select}


def get_drain(name: str, path: Path | str) -> DrainConfig:
    """The drain `name`, validating that drain alone: a mistake in another drain of the file
    does not block commands about this one (it is named when that drain is used)."""
    path, raw = _read(path)
    if name not in raw["drains"]:
        known = ", ".join(sorted(map(str, raw["drains"]))) or "none"
        raise ConfigError(f"no drain named '{name}' (configured: {known})")
    return _validate(path, {**raw, "drains": {name: raw["drains"][name]}})[name]


def _read(path: Path | str) -> tuple[Path, dict[str, Any]]:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"drains file {path} not found: set DRAINER_CONFIG to your drains YAML"
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("drains"), dict):
        raise ConfigError(f"{path}: expected a top-level mapping `drains:` of drain names")
    for name, body in raw["drains"].items():
        if isinstance(body, dict):
            body.setdefault("name", name)
            _anchor_schema_files(body, path.parent)
    return path, raw


def _anchor_schema_files(body: dict[str, Any], base: Path) -> None:
    """A schema file named relative to the drains file, made absolute (runs start anywhere)."""
    for side in ("value", "key"):
        fmt = body.get(side)
        if not isinstance(fmt, dict):
            continue
        schema = fmt.get("schema")
        is_file = fmt.get("format") in ("avro", "protobuf") or str(schema).strip().endswith(".json")
        if isinstance(schema, str) and is_file:
            path = Path(schema.strip()).expanduser()
            fmt["schema"] = str(path if path.is_absolute() else (base / path).resolve())


def _validate(path: Path, raw: dict[str, Any]) -> dict[str, DrainConfig]:
    try:
        return DrainsFile.model_validate(raw).drains
    except ValidationError as err:
        raise ConfigError(_explain(path, err)) from None
    except ValueError as err:  # raised by the allocator from inside a validator
        raise ConfigError(f"{path}: {err}") from None


def _without_sink_tag(loc: tuple[int | str, ...]) -> list[str]:
    """A location as the drains file spells it: pydantic puts the sink's type after `sink`."""
    parts = [str(part) for part in loc]
    return [
        p for i, p in enumerate(parts) if not (i and parts[i - 1] == "sink" and p in SINK_MODELS)
    ]


def _explain(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: invalid drain configuration:"]
    for problem in err.errors():
        where = ".".join(_without_sink_tag(problem["loc"])) or "(top level)"
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"  - {where}: {message}")
    return "\n".join(lines)
