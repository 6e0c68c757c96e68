"""The MLflow client for the configured registry, and MLflow errors as mlpipe errors."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from mlpipe.config import Settings
from mlpipe.errors import NotFound, StoreBusy, StoreUnavailable

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
        Path(registry_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    with mlflow_errors("registry"):
        c = MlflowClient(tracking_uri=registry_uri, registry_uri=registry_uri)
        if c.get_experiment_by_name(experiment) is None:
            _create_experiment(c, experiment, artifact_root)
    return c


def _create_experiment(c: MlflowClient, experiment: str, artifact_root: str) -> None:
    """Create the experiment; another process creating it first is no error."""
    from mlflow.exceptions import MlflowException

    try:
        c.create_experiment(experiment, artifact_location=artifact_root)
    except MlflowException as exc:
        if (
            exc.error_code != "RESOURCE_ALREADY_EXISTS"
            or c.get_experiment_by_name(experiment) is None
        ):
            raise


def experiment_id(settings: Settings) -> str:
    exp = client(settings).get_experiment_by_name(settings.experiment)
    assert exp is not None  # created by client()
    return str(exp.experiment_id)


def download_tree(uri: str, dst: str, what: str) -> Path:
    """Download the artifacts at ``uri`` under ``dst``; StoreUnavailable if no file comes back.

    MLflow answers a directory it cannot find (artifact root gone, artifact
    deleted) with an empty download, not an error; hashed, that would read as
    an artifact tampered with rather than one that could not be fetched.
    """
    import mlflow

    local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=dst))
    if not any(p.is_file() for p in local.rglob("*")):
        raise StoreUnavailable(
            f"{what}: the artifact store returned no files for {uri} "
            "(the store is unreachable, or the artifact was deleted)"
        )
    return local


# Lock contention, not an outage: SQLite's busy lock, a lost race for the next
# version number (MLflow retries it 3 times, then gives up), PostgreSQL's
# serialization failures and deadlocks. Retrying the same call can succeed.
_CONTENTION = re.compile(
    r"database is locked|database table is locked|SQLITE_BUSY|"
    r"Model Version creation error .*Giving up|could not serialize access|deadlock detected",
    re.IGNORECASE,
)


def is_contention(exc: BaseException) -> bool:
    """True if ``exc`` (or an exception it was raised from) is lock contention on the store."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if _CONTENTION.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def first_line(message: object, limit: int = 200) -> str:
    """The first line of a library's message (SQLAlchemy appends the SQL), shortened."""
    line = str(message).strip().splitlines()[0] if str(message).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


@contextmanager
def mlflow_errors(what: str) -> Iterator[None]:
    """Translate MLflow's exceptions: missing things → NotFound, lock contention →
    StoreBusy (retryable), the rest → StoreUnavailable."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import OperationalError

    try:
        yield
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise NotFound(f"{what}: {exc.message}") from exc
        if is_contention(exc):
            raise _busy(what, exc) from exc
        raise StoreUnavailable(f"{what}: {exc.message}") from exc
    except OperationalError as exc:  # raised outside MLflow's session scope (store set-up)
        if is_contention(exc):
            raise _busy(what, exc) from exc
        raise StoreUnavailable(f"{what} unavailable: {first_line(exc)}") from exc
    except (ConnectionError, OSError) as exc:
        raise StoreUnavailable(f"{what} unreachable: {exc}") from exc


def _busy(what: str, exc: BaseException) -> StoreBusy:
    message = getattr(exc, "message", exc)
    return StoreBusy(
        f"{what}: the registry is busy with concurrent writes ({first_line(message)}); retry"
    )
