"""Reading the registry: one version by reference, every model, existence checks.

An outage is never reported as a missing model: only MLflow's "no such thing"
answers become NotFound; the rest are StoreUnavailable (see ``_client``).
"""

from __future__ import annotations

from typing import Any

from mlpipe.config import Settings
from mlpipe.errors import NotFound
from mlpipe.registry._client import client, mlflow_errors
from mlpipe.registry._types import ModelSummary, VersionInfo


def parse_ref(ref: str) -> tuple[str, str | None, str | None]:
    """``NAME``, ``NAME/VERSION`` or ``NAME@ALIAS`` → (name, version, alias)."""
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return name, None, alias
    if "/" in ref:
        name, version = ref.split("/", 1)
        return name, version, None
    return ref, None, None


def show(settings: Settings, ref: str) -> VersionInfo:
    """One version by ``NAME/V``, ``NAME@alias`` or ``NAME`` (its latest). Raises NotFound."""
    name, version, alias = parse_ref(ref)
    c = client(settings)
    require_model(settings, name)
    with mlflow_errors(f"{ref}"):
        if alias:
            if alias not in (c.get_registered_model(name).aliases or {}):
                raise NotFound(f"no alias @{alias} on {name}")  # MLflow calls it a bad parameter
            mv = c.get_model_version_by_alias(name, alias)
        elif version:
            mv = _get_version(settings, name, version)
        else:
            versions = c.search_model_versions(f"name='{name}'")
            mv = max(versions, key=lambda v: int(v.version))
    return VersionInfo.from_mlflow(mv)


def list_models(settings: Settings) -> list[ModelSummary]:
    """Every registered model with its latest version and aliases."""
    c = client(settings)
    with mlflow_errors("registry"):
        models = c.search_registered_models()
    summaries = []
    for m in models:
        latest = max((int(v.version) for v in (m.latest_versions or [])), default=None)
        summaries.append(
            ModelSummary(
                name=m.name,
                latest_version=str(latest) if latest is not None else None,
                aliases=dict(m.aliases or {}),
            )
        )
    return summaries


def require_model(settings: Settings, name: str) -> None:
    """Raise NotFound unless ``name`` is a registered model; StoreUnavailable when the
    registry cannot be asked (an outage is never reported as a missing model)."""
    from mlflow.exceptions import MlflowException

    try:
        client(settings).get_registered_model(name)
    except MlflowException as exc:
        if not _absent(exc):
            with mlflow_errors(f"model {name}"):
                raise
        raise NotFound(f"no registered model named {name!r}") from exc


def _absent(exc: Any) -> bool:
    """An MLflow error that means "no such thing" (an invalid name cannot exist either)."""
    return exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


def classes_of(settings: Settings, name: str, version: str) -> tuple[object, ...] | None:
    """The class labels of classifier ``name/version``; None for a regression or a
    version the registry does not hold. Raises StoreUnavailable when it is unreachable."""
    try:
        task = show(settings, f"{name}/{version}").task
    except NotFound:
        return None
    return tuple(task.classes) if task.is_classifier else None


def require_version(settings: Settings, name: str, version: str) -> None:
    """Raise NotFound unless ``name`` has a version ``version``."""
    require_model(settings, name)
    _get_version(settings, name, version)


def _get_version(settings: Settings, name: str, version: str) -> Any:
    from mlflow.exceptions import MlflowException

    c = client(settings)
    try:
        return c.get_model_version(name, str(version))
    except MlflowException as exc:
        if not _absent(exc):
            with mlflow_errors(f"{name}/{version}"):
                raise
        with mlflow_errors(f"versions of {name}"):
            versions = sorted(int(v.version) for v in c.search_model_versions(f"name='{name}'"))
        have = ", ".join(map(str, versions)) or "none"
        raise NotFound(f"{name} has no version {version} (versions: {have})") from exc
