"""Typed settings: defaults, then ``mlpipe.toml``, then ``MLPIPE_*`` variables, then flags.

A project is a directory with an ``mlpipe.toml``: its home is ``MLPIPE_HOME`` when
set, else the nearest directory at or above the working directory that holds one
(as git finds ``.git``); ``MLPIPE_CONFIG`` names another file. Its top-level keys are the base;
a ``[profile.NAME]`` table overrides them when that profile is active
(``MLPIPE_PROFILE`` or ``--profile``). Unknown keys are rejected with the key
and the file named. Relative paths are resolved against the home.
"""

from __future__ import annotations

import getpass
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from mlpipe.errors import ConfigError

CONFIG_FILE = "mlpipe.toml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServingSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(3000, ge=1, le=65535)
    workers: int = Field(2, ge=1)
    # 16, not 64: batches run on the event loop, and a shorter batch lets it refuse sooner
    max_batch_size: int = Field(16, ge=1)  # decision 020
    max_latency_ms: int = Field(1000, ge=1)  # decision 002: 20 ms collapsed into 503s
    feature_cache_ttl_s: float = Field(30.0, ge=0)
    feature_cache_size: int = Field(100_000, ge=0)
    prediction_cache_size: int = Field(100_000, ge=0)
    reload_interval_s: float = Field(1.0, gt=0)
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    # A request not answered this long after it arrived gets 504 (and is logged as a
    # timeout, never as an answer); the body must also arrive within it (else 408).
    request_timeout_s: float = Field(10.0, gt=0)
    # A request head (request line and headers) larger than this gets 431, one not complete
    # this long after its first byte (or the connection's start) is closed (decision 025).
    # 0 lifts a bound; both 0 is uvicorn's own parser, only for measuring what they cost.
    max_header_bytes: int = Field(64 * 1024, ge=0)
    header_timeout_s: float = Field(10.0, ge=0)
    # BentoML's OpenTelemetry middleware on /predict and /v2: off, it passes every request
    # straight through (at BentoML's default sample rate of 0 it recorded nothing anyway);
    # on, BentoML's own `tracing` configuration (exporter, sample rate) applies.
    tracing: bool = False
    # The usual POST /predict answered by the worker's protocol, its batches formed by the
    # event loop's turns (decision 047); false: every request goes through the app's layers.
    lane: bool = True


class PredlogSettings(_Section):
    # "none" logs nothing: only for measuring what the log costs (bench/), never to serve
    sink: Literal["file", "kafka", "none"] = "file"
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_topic: str = "mlpipe-predictions"
    kafka_timeout_s: float = Field(5.0, gt=0)
    # `warehouse sync` reads the topic as this consumer group (its position is kept in the
    # warehouse, written with the rows; Kafka's committed offsets only mirror it for tools)
    kafka_group: str = "mlpipe-warehouse"
    # records read into one warehouse transaction by `warehouse sync`, and how long it waits
    # to fill one: the answer-to-warehouse delay of `sync --follow` (bench/kafka.py)
    kafka_sync_batch: int = Field(100_000, ge=1)
    kafka_sync_wait_s: float = Field(0.25, gt=0)
    # librdkafka settings added to the producer's and the consumer's: a managed Kafka's
    # security.protocol, sasl.mechanism, sasl.username, ssl.ca.location... (docs/production.md)
    kafka_config: dict[str, str] = Field(default_factory=dict)
    fsync_interval_s: float = Field(0.2, ge=0)
    segment_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    segment_max_age_s: float = Field(300.0, gt=0)
    # A failed log write (disk full): refuse the batch with 503 (closed), or answer and
    # count the lost rows (open). Either way it is logged and in /metrics.
    on_write_error: Literal["fail_closed", "fail_open"] = "fail_closed"
    # A closed segment the warehouse loaded whole is deleted (moved to archive_dir when set)
    # this many hours after it was loaded; 0: by the next sync (docs/data-lifecycle.md)
    keep_loaded_hours: float = Field(24.0, ge=0)
    archive_dir: Path | None = None
    # `doctor` fails the prediction log's check under this share of free space on its disk
    min_free_percent: float = Field(10.0, ge=0, le=100)


class MonitorSettings(_Section):
    drift_sample_rows: int = Field(50_000, ge=100)
    # Share of drifted model inputs that makes the verdict "drift". Evidently's
    # dataset default is 0.5; a fraud model with 8 inputs should not wait for 4.
    drift_share_threshold: float = Field(0.25, gt=0, le=1)
    drift_min_rows: int = Field(30, ge=1)
    canary_min_requests: int = Field(200, ge=1)
    canary_max_error_rate_delta: float = Field(0.01, ge=0)
    canary_max_p99_ratio: float = Field(1.5, gt=0)
    # A p99 no more than this above the champion's passes whatever the ratio (docs/canary.md).
    canary_p99_slack_ms: float = Field(25.0, ge=0)
    canary_max_accuracy_drop: float = Field(0.02, ge=0)
    canary_min_labels: int = Field(100, ge=1)
    canary_prediction_drift_p: float = Field(0.01, gt=0, lt=1)
    skew_sample_rows: int = Field(1000, ge=1)
    skew_rel_tolerance: float = Field(1e-6, ge=0)
    skew_max_mismatch_rate: float = Field(0.01, ge=0, le=1)


class SecuritySettings(_Section):
    """Who may call the service, and how often (see docs/security.md)."""

    # auto: keys required once any tenant exists in the control plane; on/off force it
    auth: Literal["auto", "on", "off"] = "auto"
    open_paths: list[str] = Field(default_factory=lambda: ["/livez", "/readyz", "/metrics"])
    default_rate: float = Field(100.0, gt=0)  # requests/s per tenant, all workers together
    default_burst: int = Field(200, ge=1)
    key_refresh_s: float = Field(1.0, gt=0)  # how soon an added or revoked key takes effect
    redis_url: str | None = None  # shared token buckets across gateways; None: per process


class ReliabilitySettings(_Section):
    """Overload and fault handling on the request path."""

    # per worker, held over the server's workers together: beyond max_inflight × workers
    # in flight, /predict answers 503 at once. By Little's law the bound over the
    # throughput is how long admitted requests queue above saturation (decision 010:
    # 48 once the server answered 2 x faster)
    max_inflight: int = Field(48, ge=1)
    retry_after_s: int = Field(1, ge=1)
    # every Nth /predict answer of a worker says Connection: close (0: never). Workers share
    # one listening socket and the first to wake accepts a whole burst of connections: at
    # c=32 one worker held all 32 and the other idled. Reconnects land on whichever worker
    # is free to accept, so connections spread: c=32 1.4x req/s here (decision 007)
    reconnect_every: int = Field(100, ge=0)
    breaker_failures: int = Field(3, ge=1)  # consecutive feature-store failures that open it
    breaker_reset_s: float = Field(5.0, gt=0)  # open this long, then one probe
    breaker_slow_s: float = Field(0.25, gt=0)  # a call slower than this counts as a failure


class Settings(BaseSettings):
    """Every store's URL or path, and the knobs of serving, logging and monitoring."""

    model_config = SettingsConfigDict(
        env_prefix="MLPIPE_", env_nested_delimiter="__", extra="forbid"
    )

    home: Path = Field(default_factory=lambda: project_or_cwd())
    profile: str = "local"
    state_dir: Path = Path(".mlpipe")
    registry_uri: str | None = None
    artifact_root: str | None = None
    control_url: str | None = None
    warehouse_url: str | None = None
    warehouse_lock_timeout_s: float = Field(60.0, ge=0)
    # rows of predictions, outcomes and quarantine older than this many days are pruned
    # (`warehouse prune`, and after each sync); None keeps everything. Per tenant:
    # `tenants set NAME --retention-days N` (docs/data-lifecycle.md)
    warehouse_retention_days: int | None = Field(None, ge=1)
    # false: the project has no Feast repository, and models take every input from the request
    feature_store: bool = True
    feature_repo: Path = Path("feature_repo")
    feature_store_yaml: str = "feature_store.yaml"  # which Feast config in the repo; prod: Redis
    predlog_dir: Path | None = None
    reports_dir: Path = Path("reports")
    experiment: str = "mlpipe"
    actor: str = Field(default_factory=lambda: _current_user())
    pii_fields: list[str] = Field(default_factory=list)
    pii_key: str = "mlpipe-default-pii-key"
    serving: ServingSettings = Field(default_factory=ServingSettings)
    predlog: PredlogSettings = Field(default_factory=PredlogSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    reliability: ReliabilitySettings = Field(default_factory=ReliabilitySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls, init_settings))

    @field_validator("control_url", "warehouse_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        """A URL SQLAlchemy can open, checked here so a typo is one line, not a traceback."""
        if value is not None and _database_backend(value) not in _database_backends():
            raise ValueError(
                "not a database URL SQLAlchemy can open (e.g. sqlite:///PATH, "
                "duckdb:///PATH, postgresql+psycopg://HOST/DB)"
            )
        return value

    def path(self, value: Path | str) -> Path:
        """Resolve a configured path against the project home."""
        p = Path(value)
        return p if p.is_absolute() else self.home / p

    @property
    def state_path(self) -> Path:
        return self.path(self.state_dir)

    @property
    def registry(self) -> str:
        return self.registry_uri or f"sqlite:///{self.state_path / 'mlflow.db'}"

    @property
    def artifacts(self) -> str:
        return self.artifact_root or (self.state_path / "artifacts").as_uri()

    @property
    def control(self) -> str:
        return self.control_url or f"sqlite:///{self.state_path / 'control.db'}"

    @property
    def warehouse(self) -> str:
        return self.warehouse_url or f"duckdb:///{self.state_path / 'warehouse.duckdb'}"

    @property
    def feature_repo_path(self) -> Path:
        return self.path(self.feature_repo)

    @property
    def feature_store_yaml_path(self) -> Path:
        """The Feast config file the settings select (relative names are inside the repo)."""
        return self.feature_repo_path / self.feature_store_yaml

    @property
    def predlog_path(self) -> Path:
        return self.path(self.predlog_dir) if self.predlog_dir else self.state_path / "predlog"

    @property
    def reports_path(self) -> Path:
        return self.path(self.reports_dir)


def _database_backend(url: str) -> str | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).get_backend_name()
    except ArgumentError:
        return None


def _database_backends() -> set[str]:
    """SQLAlchemy's own dialects and those installed as plugins (duckdb), none imported."""
    from importlib.metadata import entry_points

    from sqlalchemy import dialects

    plugins = {ep.name.split(".")[0] for ep in entry_points(group="sqlalchemy.dialects")}
    return set(dialects.__all__) | plugins


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _nearest_project(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``mlpipe.toml``."""
    for directory in (start, *start.parents):
        if (directory / CONFIG_FILE).is_file():
            return directory
    return None


class UntrustedProject(ConfigError):
    """A discovered ``mlpipe.toml`` (or its directory) another user owns or can write."""


SAFE_DIRECTORIES_ENV = "MLPIPE_SAFE_DIRECTORIES"


def _require_trusted(directory: Path) -> None:
    """Refuse a discovered project another user could have planted or can change.

    As git's ``safe.directory``: the directory and its ``mlpipe.toml`` must be owned
    by the current user and not writable by group or others, unless the directory
    is listed in ``MLPIPE_SAFE_DIRECTORIES`` (``os.pathsep``-separated, ``*`` for any).
    Only the walk-up is checked: ``MLPIPE_HOME`` and ``MLPIPE_CONFIG`` name a
    project explicitly and are trusted.
    """
    if not hasattr(os, "geteuid"):  # no POSIX ownership to check
        return
    safe = [e for e in os.environ.get(SAFE_DIRECTORIES_ENV, "").split(os.pathsep) if e]
    if "*" in safe or any(Path(e).expanduser().resolve() == directory for e in safe):
        return
    me = os.geteuid()
    for path in (directory / CONFIG_FILE, directory):
        info = path.stat()
        if info.st_uid != me:
            problem = f"is owned by uid {info.st_uid}, not by you (uid {me})"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problem = f"is writable by {'others' if info.st_mode & stat.S_IWOTH else 'its group'}"
        else:
            continue
        raise UntrustedProject(
            f"refusing the project found at {directory / CONFIG_FILE}: {path} {problem}; "
            f"if you trust it, set {SAFE_DIRECTORIES_ENV}={directory} or MLPIPE_HOME={directory}"
        )


def find_project(start: Path | None = None) -> Path:
    """The project home: ``MLPIPE_HOME`` when set, else the nearest directory at or above
    ``start`` (default: the working directory) holding ``mlpipe.toml``, as git finds ``.git``.

    With only ``MLPIPE_CONFIG`` set, a directory without ``mlpipe.toml`` (the working
    directory) is the home. Raises :class:`ConfigError` when there is no project, and
    :class:`UntrustedProject` when the one found is another user's or writable by
    others (see :func:`_require_trusted`).
    """
    explicit = os.environ.get("MLPIPE_HOME")
    if explicit:
        return Path(explicit)
    here = (start or Path.cwd()).resolve()
    found = _nearest_project(here)
    if found is not None:
        _require_trusted(found)
        return found
    if os.environ.get("MLPIPE_CONFIG"):
        return here
    raise ConfigError(
        f"not an mlpipe project (run mlpipe init): no {CONFIG_FILE} in {here} or above it"
    )


def project_or_cwd() -> Path:
    """The project's home, or the working directory outside any project (library use, init)."""
    try:
        return find_project()
    except UntrustedProject:
        raise
    except ConfigError:
        return Path.cwd()


def config_path(home: Path | None = None) -> Path:
    """Where ``mlpipe.toml`` is read: ``MLPIPE_CONFIG``, else in ``home`` (or the project's)."""
    explicit = os.environ.get("MLPIPE_CONFIG")
    if explicit:
        return Path(explicit)
    return (home or project_or_cwd()) / CONFIG_FILE


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc


def _profile_values(data: dict[str, Any], profile: str, path: Path) -> dict[str, Any]:
    profiles = data.pop("profile", {})
    if not isinstance(profiles, dict) or not all(isinstance(t, dict) for t in profiles.values()):
        raise ConfigError(f"{path}: 'profile' must be a table of [profile.NAME] tables")
    if profile in profiles:
        data = {**data, **profiles[profile]}
    elif profile != "local" and profiles:
        raise ConfigError(f"{path}: no [profile.{profile}] (have: {', '.join(sorted(profiles))})")
    return data


class _TomlSource(PydanticBaseSettingsSource):
    """Values from ``mlpipe.toml``, with the active profile's table laid over the base.

    The file is the one of the home passed to :class:`Settings` (``Settings(home=...)``),
    else of the project found from the working directory.
    """

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        home = getattr(self._init, "init_kwargs", {}).get("home")
        path = config_path(Path(home) if home else None)
        profile = os.environ.get("MLPIPE_PROFILE") or "local"
        return {**_profile_values(_read_toml(path), profile, path), "profile": profile}


def load_settings(**overrides: Any) -> Settings:
    """Build the settings; raises :class:`ConfigError` naming the file (or variable) and field."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "profile" in overrides:
        os.environ["MLPIPE_PROFILE"] = overrides["profile"]
    home = overrides.get("home")
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        where = config_path(Path(home) if home else None)
        raise ConfigError(f"invalid settings ({where} or MLPIPE_*): {problems}") from exc
    except SettingsError as exc:
        raise ConfigError(_env_problem(exc)) from exc
    settings.home = settings.home.resolve()
    return settings


def _env_problem(exc: SettingsError) -> str:
    """One line for an ``MLPIPE_*`` value pydantic-settings could not parse (not JSON)."""
    field = re.search(r'field "(\w+)"', str(exc))
    name = f"MLPIPE_{field.group(1).upper()}" if field else "an MLPIPE_* variable"
    return (
        f"invalid settings: {name} is not valid JSON (a list or table setting is JSON in "
        f"the environment, e.g. MLPIPE_PII_FIELDS='[\"email\"]'; or set one key: "
        f"MLPIPE_SERVING__PORT=4000)"
    )


__all__ = [
    "CONFIG_FILE",
    "MonitorSettings",
    "PredlogSettings",
    "ReliabilitySettings",
    "SecuritySettings",
    "ServingSettings",
    "Settings",
    "config_path",
    "find_project",
    "project_or_cwd",
    "load_settings",
]
