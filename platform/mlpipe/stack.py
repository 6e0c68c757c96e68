"""The local stack: create it (``init``) and check every store (``doctor``)."""

from __future__ import annotations

from collections.abc import Callable, Sized
from dataclasses import dataclass
from pathlib import Path

from mlpipe import deployments, features, registry, warehouse
from mlpipe.config import Settings
from mlpipe.errors import MlpipeError


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


def init(settings: Settings) -> list[InitStep]:
    """Create what is missing of the local stack; a second run creates nothing."""
    steps = [
        _ensure_dir("state", settings.state_path),
        _ensure_dir("prediction log", settings.predlog_path),
        _ensure_dir("reports", settings.reports_path),
    ]
    stores: list[tuple[str, str, Callable[[], object]]] = [
        ("registry", settings.registry, lambda: registry.client(settings)),
        ("control plane", settings.control, lambda: deployments.control_plane(settings)),
        ("warehouse", settings.warehouse, lambda: _warehouse_init(settings)),
    ]
    steps += [_ensure_store(store, url, create) for store, url, create in stores]
    return steps


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
    """Check each store the settings name; never raises for an unreachable store."""
    checks: list[tuple[str, str, Callable[[], str]]] = [
        ("registry", settings.registry, lambda: _check_registry(settings)),
        ("control plane", settings.control, lambda: _check_control(settings)),
        ("feature store", str(settings.feature_repo_path), lambda: _check_features(settings)),
        ("warehouse", settings.warehouse, lambda: _check_warehouse(settings)),
        ("prediction log", str(settings.predlog_path), lambda: _check_dir(settings.predlog_path)),
        ("reports", str(settings.reports_path), lambda: _check_dir(settings.reports_path)),
    ]
    return [_run_check(store, location, check) for store, location, check in checks]


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


__all__ = ["InitStep", "StoreCheck", "doctor", "init"]
