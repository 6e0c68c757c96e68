"""The MLflow client for the configured registry, and MLflow errors as mlpipe errors."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

from mlpipe.config import Settings
from mlpipe.errors import NotFound, StoreUnavailable

if TYPE_CHECKING:
    from mlflow import MlflowClient

# MLflow must never phone home from a serving or CI process.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def client(settings: Settings) -> MlflowClient:
    """An MlflowClient on the settings' registry; also points the fluent API at it."""
    import mlflow

    c = _client(settings.registry, settings.artifacts, settings.experiment)
    mlflow.set_tracking_uri(settings.registry)
    mlflow.set_registry_uri(settings.registry)
    return c


@lru_cache(maxsize=4)
def _client(registry_uri: str, artifact_root: str, experiment: str) -> MlflowClient:
    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    if registry_uri.startswith("sqlite:///"):
        from pathlib import Path

        Path(registry_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    with mlflow_errors("registry"):
        c = MlflowClient(tracking_uri=registry_uri, registry_uri=registry_uri)
        if c.get_experiment_by_name(experiment) is None:
            c.create_experiment(experiment, artifact_location=artifact_root)
    return c


def experiment_id(settings: Settings) -> str:
    exp = client(settings).get_experiment_by_name(settings.experiment)
    assert exp is not None  # created by client()
    return str(exp.experiment_id)


@contextmanager
def mlflow_errors(what: str) -> Iterator[None]:
    """Translate MLflow's exceptions: missing things → NotFound, the rest → StoreUnavailable."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise NotFound(f"{what}: {exc.message}") from exc
        raise StoreUnavailable(f"{what}: {exc.message}") from exc
    except (ConnectionError, OSError) as exc:
        raise StoreUnavailable(f"{what} unreachable: {exc}") from exc
