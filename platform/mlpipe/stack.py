"""A project and its local stack: create them (``init``) and check every store (``doctor``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sized
from dataclasses import dataclass
from pathlib import Path

from mlpipe import deployments, features, registry, warehouse
from mlpipe.config import CONFIG_FILE, Settings, load_settings, project_or_cwd
from mlpipe.errors import InvalidInput, MlpipeError
from mlpipe.windows import duration_text


@dataclass(frozen=True)
class InitStep:
    store: str
    location: str
    created: bool


@dataclass(frozen=True)
class StoreCheck:
    store: str
    location: str
    ok: bool
    detail: str
    configured: bool = True  # False: the project has none (no feature store), which is fine


def init_project(
    directory: Path | None = None, *, feature_store: bool = True, profile: str | None = None
) -> tuple[Settings, list[InitStep]]:
    """Make ``directory`` a project and create its local stack; a second run creates nothing.

    Without ``directory``: the project around the working directory, else the working
    directory (so ``init`` in a project's subdirectory never starts a second stack).
    Raises :class:`InvalidInput`, changing nothing, when an existing ``mlpipe.toml``
    keeps a feature store that ``feature_store=False`` says the project has not.
    """
    home = (directory or project_or_cwd()).resolve()
    if home.exists() and not home.is_dir():
        raise InvalidInput(f"{home} is not a directory")
    if (home / CONFIG_FILE).exists() and not feature_store:
        if load_settings(home=home, profile=profile).feature_store:
            raise InvalidInput(
                f"{home / CONFIG_FILE} has a feature store: set feature_store = false in it"
            )
    steps = [write_project(home, feature_store=feature_store)]
    settings = load_settings(home=home, profile=profile)
    return settings, steps + init(settings)


def write_project(home: Path, *, feature_store: bool = True) -> InitStep:
    """Make ``home`` a project: write its ``mlpipe.toml`` unless it has one (never rewritten)."""
    path = home / CONFIG_FILE
    if path.exists():
        return InitStep("project", str(path), created=False)
    try:
        home.mkdir(parents=True, exist_ok=True)
        path.write_text(_PROJECT_TOML.format(feature_store=str(feature_store).lower()))
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror}") from exc
    return InitStep("project", str(path), created=True)


_PROJECT_TOML = """\
# An mlpipe project: commands run in this directory or below it use these settings.
# Every setting is optional (docs: configuration); MLPIPE_* variables override them.

# false: no Feast repository; models take every input from the request
feature_store = {feature_store}
"""


def init(settings: Settings) -> list[InitStep]:
    """Create what is missing of the local stack; a second run creates nothing."""
    steps = [
        _ensure_dir("state", settings.state_path),
        _ensure_dir("prediction log", settings.predlog_path),
        _ensure_dir("reports", settings.reports_path),
    ]
    if settings.feature_store:
        steps.append(_ensure_feature_repo(settings))
    stores: list[tuple[str, str, Callable[[], object]]] = [
        ("registry", settings.registry, lambda: registry.client(settings)),
        ("control plane", settings.control, lambda: deployments.control_plane(settings)),
        ("warehouse", settings.warehouse, lambda: _warehouse_init(settings)),
    ]
    steps += [_ensure_store(store, url, create) for store, url, create in stores]
    return steps


def _ensure_feature_repo(settings: Settings) -> InitStep:
    """A Feast repository to add definitions to, where the settings name one and none is."""
    yaml_file = settings.feature_store_yaml_path
    existed = yaml_file.is_file()
    if not existed:
        yaml_file.parent.mkdir(parents=True, exist_ok=True)
        yaml_file.write_text(_FEATURE_STORE_YAML.format(project=_feast_project(settings.home)))
    return InitStep("feature store", str(yaml_file), created=not existed)


_FEATURE_STORE_YAML = """\
# Feast repository of this project: add entity and feature-view definitions (*.py)
# beside this file, then `mlpipe features apply`. Paths are relative to this directory.
project: {project}
provider: local
registry: data/registry.db
online_store:
  type: sqlite
  path: data/online_store.db
offline_store:
  type: file
entity_key_serialization_version: 3
"""


def _feast_project(home: Path) -> str:
    """Feast wants a project name of letters, digits and '_' that starts with a letter."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", home.name).strip("_") or "project"
    return name if name[0].isalpha() else f"p_{name}"


def _warehouse_init(settings: Settings) -> None:
    with warehouse.write(settings):
        pass  # opening for write runs the warehouse's migrations


def _ensure_dir(store: str, path: Path) -> InitStep:
    existed = path.is_dir()
    path.mkdir(parents=True, exist_ok=True)
    return InitStep(store, str(path), created=not existed)


def _ensure_store(store: str, url: str, create: Callable[[], object]) -> InitStep:
    path = _local_file(url)
    existed = path.exists() if path else True
    create()
    return InitStep(store, url, created=not existed)


def _local_file(url: str) -> Path | None:
    for prefix in ("sqlite:///", "duckdb:///"):
        if url.startswith(prefix):
            return Path(url.removeprefix(prefix))
    return None


def doctor(settings: Settings) -> list[StoreCheck]:
    """Check each store the settings name; never raises for an unreachable store.

    A project without a feature store (``feature_store = false``) gets a passing
    "not configured" row for it.
    """
    feature_store = StoreCheck("feature store", "", True, "not configured", configured=False)
    checks: list[tuple[str, str, Callable[[], str]]] = [
        ("registry", settings.registry, lambda: _check_registry(settings)),
        ("control plane", settings.control, lambda: _check_control(settings)),
        ("aliases", settings.registry, lambda: deployments.check_aliases(settings)),
        ("feature store", str(settings.feature_repo_path), lambda: _check_features(settings)),
        ("warehouse", settings.warehouse, lambda: _check_warehouse(settings)),
        _predlog_check(settings),
        ("reports", str(settings.reports_path), lambda: _check_dir(settings.reports_path)),
    ]
    return [
        feature_store
        if store == "feature store" and not settings.feature_store
        else _run_check(store, location, check)
        for store, location, check in checks
    ]


def _predlog_check(settings: Settings) -> tuple[str, str, Callable[[], str]]:
    p = settings.predlog
    if p.sink == "kafka":
        where = f"kafka://{p.kafka_bootstrap}/{p.kafka_topic}"
        return ("prediction log", where, lambda: _check_kafka_log(settings))
    return ("prediction log", str(settings.predlog_path), lambda: _check_log_dir(settings))


def _check_log_dir(settings: Settings) -> str:
    """Writable; its disk use, the oldest segment not yet loaded; fails on a nearly full disk."""
    writable = _check_dir(settings.predlog_path)
    db = _local_file(settings.warehouse)
    usage = warehouse.log_usage(settings, warehouse=db is None or db.exists())
    oldest = (
        "every segment loaded"
        if usage.oldest_unloaded_s is None
        else f"{usage.unloaded} not loaded, oldest {duration_text(usage.oldest_unloaded_s)}"
    )
    detail = (
        f"{writable}; {usage.segments} segment(s), {usage.bytes / 1e6:.1f} MB ({oldest}); "
        f"{usage.free_percent:.1f}% of its disk free"
    )
    if usage.free_percent < settings.predlog.min_free_percent:
        raise MlpipeError(
            f"{detail}: under predlog.min_free_percent ({settings.predlog.min_free_percent:g}%); "
            "sync the warehouse, or lower predlog.keep_loaded_hours (docs/data-lifecycle.md)"
        )
    return detail


def _check_kafka_log(settings: Settings) -> str:
    """The topic's partitions and how far the warehouse lags each; fails on records lost."""
    lags = warehouse.topic_lag(settings)
    if not lags:
        return "topic not created yet (the first logged prediction creates it)"
    expired = sum(p.expired for p in lags)
    if expired:
        raise MlpipeError(
            f"{expired} record(s) deleted by Kafka's retention before the warehouse loaded "
            "them: sync more often than the topic's retention.ms (docs/production.md)"
        )
    per = ", ".join(f"p{p.partition}: {p.lag}" for p in lags)
    return f"{len(lags)} partition(s); not yet in the warehouse: {sum(p.lag for p in lags)} ({per})"


def _run_check(store: str, location: str, check: Callable[[], str]) -> StoreCheck:
    try:
        return StoreCheck(store, location, True, check())
    except MlpipeError as exc:
        return StoreCheck(store, location, False, str(exc))
    except Exception as exc:  # noqa: BLE001 - doctor reports every failure, whatever its type
        return StoreCheck(store, location, False, f"{type(exc).__name__}: {exc}")


def _require_file(url: str, hint: str) -> None:
    path = _local_file(url)
    if path is not None and not path.exists():
        raise MlpipeError(f"{path} does not exist ({hint})")


def _count_initialized(url: str, items: Callable[[], Sized], what: str) -> str:
    """Require the file ``mlpipe init`` creates at ``url``, then count ``items()``."""
    _require_file(url, "run `mlpipe init`")
    return f"{len(items())} {what}"


def _check_registry(settings: Settings) -> str:
    return _count_initialized(
        settings.registry, lambda: registry.list_models(settings), "registered model(s)"
    )


def _check_control(settings: Settings) -> str:
    return _count_initialized(
        settings.control, lambda: deployments.generations(settings), "deployed model(s)"
    )


def _check_features(settings: Settings) -> str:
    yaml_file = settings.feature_store_yaml_path
    if not yaml_file.is_file():
        raise MlpipeError(f"no {yaml_file.name} in {yaml_file.parent}")
    online = features.open_store(settings).config.online_store.type
    services = features.list_services(settings)
    return f"{len(services)} feature service(s), online store: {online}"


def _check_warehouse(settings: Settings) -> str:
    return _count_initialized(
        settings.warehouse,
        lambda: warehouse.models_in_warehouse(settings),
        "model(s) with logged predictions",
    )


def _check_dir(path: Path) -> str:
    if not path.is_dir():
        raise MlpipeError(f"{path} does not exist (run `mlpipe init`)")
    probe = path / ".doctor-probe"
    probe.write_text("ok")
    probe.unlink()
    return "writable"


__all__ = ["InitStep", "StoreCheck", "doctor", "init", "init_project", "write_project"]
