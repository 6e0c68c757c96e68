"""Writing one registration: a run, a logged model, then the version, and nothing left behind.

An attempt writes, in order: an MLflow run (the metrics and the training
reference), the model as a logged model of that run (its artifact), and last
the model version, whose tags (lineage, reference URI and the artifact's
sha256, hashed from the stored bytes) go in the same transaction as the
version row. So a version exists complete or not at all.

If any step fails, the attempt deletes what it wrote before the error goes
on: the artifacts of the run and of its logged models, then the run and the
logged models themselves (marked deleted, as MLflow's own delete does). No
run or artifact is left that no version names; the registered model itself
(an empty name, if the failed attempt created it) stays.

Lock contention (SQLite's "database is locked" when several processes write,
a lost race for the next version number, PostgreSQL serialization failures)
is no outage: the attempt is cleaned up and run again after a jittered,
doubling pause. When contention outlasts ``ATTEMPTS``, :class:`StoreBusy`
says that nothing was registered and that the call can be retried.
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mlpipe.config import Settings
from mlpipe.errors import StoreBusy
from mlpipe.registry import _lineage, tag_names
from mlpipe.registry._client import (
    client,
    download_tree,
    experiment_id,
    first_line,
    is_contention,
    mlflow_errors,
)

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

    from mlpipe.registry._model_flavor import ModelFlavor

logger = logging.getLogger("mlpipe.registry")

ATTEMPTS = 5
BACKOFF_S = 0.2  # first pause at most this, doubling each attempt (full jitter)
BACKOFF_MAX_S = 3.0

T = TypeVar("T")


def log_and_register(
    settings: Settings,
    name: str,
    *,
    flavor: ModelFlavor,
    model: Any,
    signature: Any,
    reference: pd.DataFrame,
    tags: dict[str, str],
    description: str | None,
) -> ModelVersion:
    """Log ``model`` with its run and register it as the next version of ``name``.

    Retries lock contention from scratch; raises StoreBusy (nothing registered,
    retryable) when it outlasts every attempt, StoreUnavailable if the registry
    cannot be reached. Whatever the error, a failed attempt leaves nothing behind.
    """
    candidate = _Candidate(name, flavor, model, signature, reference, tags, description)
    last: StoreBusy | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            _pause(attempt)
        try:
            return _attempt(settings, candidate)
        except StoreBusy as exc:
            last = exc
            logger.info("registering %s: attempt %d of %d: %s", name, attempt + 1, ATTEMPTS, exc)
    assert last is not None
    raise StoreBusy(
        f"the registry stayed busy with concurrent writes through {ATTEMPTS} attempts to "
        f"register {name} ({first_line(last.__cause__ or last)}); nothing was registered, "
        "retry"
    ) from last


def _pause(attempt: int) -> None:
    time.sleep(random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (attempt - 1))))


@dataclass(frozen=True)
class _Candidate:
    """What one registration writes: every attempt starts from the same candidate."""

    name: str
    flavor: ModelFlavor
    model: Any
    signature: Any
    reference: pd.DataFrame
    tags: dict[str, str]
    description: str | None


def _attempt(settings: Settings, candidate: _Candidate) -> ModelVersion:
    import mlflow

    c = client(settings)
    tags = dict(candidate.tags)
    run_id = None
    quiet = contextlib.redirect_stdout(io.StringIO())  # MLflow writes "View run" links
    try:
        with mlflow_errors("registry"), tempfile.TemporaryDirectory() as tmp, quiet:
            with mlflow.start_run(experiment_id=experiment_id(settings)) as run:
                run_id = run.info.run_id
                mlflow.log_metrics(tag_names.metrics(tags))
                info = candidate.flavor.log(candidate.model, candidate.signature, tags)
                ref_path = Path(tmp) / "reference.parquet"
                candidate.reference.to_parquet(ref_path, index=False)
                mlflow.log_artifact(str(ref_path), "reference")
            stored = download_tree(info.model_uri, str(Path(tmp) / "check"), "logged model")
            tags[tag_names.ARTIFACT_SHA256] = _lineage.tree_sha256(stored)
            tags[tag_names.REFERENCE_URI] = f"runs:/{run_id}/reference/reference.parquet"
            _ensure_registered_model(c, candidate.name)
            mv = c.create_model_version(
                candidate.name,
                info.model_uri,
                run_id=run_id,
                tags=tags,
                description=candidate.description,
                await_creation_for=0,
                model_id=info.model_id,
            )
    except BaseException:
        if run_id is not None:
            _discard(settings, run_id)
        raise
    _link_logged_model(settings, info.model_id, mv)
    return mv


def _ensure_registered_model(c: MlflowClient, name: str) -> None:
    """Create the registered model unless it exists; a concurrent creator winning is fine."""
    from mlflow.exceptions import MlflowException

    try:
        c.get_registered_model(name)
        return
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    try:
        c.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise


def _link_logged_model(settings: Settings, model_id: str, mv: ModelVersion) -> None:
    """Name the version on its logged model (MLflow's UI link), as ``mlflow.register_model`` does.

    The version is committed by now; failing to add this link loses nothing but
    the link, so it is logged, not raised.
    """
    import json

    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    value = json.dumps([{"name": mv.name, "version": mv.version}])
    try:
        client(settings).set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: value})
    except Exception as exc:  # noqa: BLE001 - a cosmetic link; the version stands
        logger.info("%s/%s: logged model not linked: %s", mv.name, mv.version, first_line(exc))


def _discard(settings: Settings, run_id: str) -> None:
    """Delete a failed attempt's run and logged models, their artifacts first. Never raises:
    what could not be deleted is logged (a warning naming the run)."""
    c = client(settings)
    try:
        exp = experiment_id(settings)
        models = _retrying(
            partial(c.search_logged_models, [exp], filter_string=f"source_run_id = '{run_id}'")
        )
        for m in models:
            _delete_tree(m.artifact_location, m.model_id)
            _retrying(partial(c.delete_logged_model, m.model_id))
        run = _retrying(partial(c.get_run, run_id))
        _delete_tree(run.info.artifact_uri, run_id)
        _retrying(partial(c.delete_run, run_id))
    except Exception as exc:  # noqa: BLE001 - the caller's error is the one to raise
        logger.warning(
            "a failed registration left run %s (or its logged model) behind: %s",
            run_id,
            first_line(exc),
        )


def _delete_tree(uri: str, owner: str) -> None:
    """Delete the artifacts under ``uri``; on local disk also the owner's own directory
    (``<root>/<run id>`` or ``<root>/models/<model id>``), which MLflow leaves empty."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.utils.file_utils import local_file_uri_to_path
    from mlflow.utils.uri import is_local_uri

    # MLflow leaves these three unannotated.
    get_artifact_repository(uri).delete_artifacts()  # type: ignore[no-untyped-call]
    if not is_local_uri(uri):  # type: ignore[no-untyped-call]
        return
    path = Path(local_file_uri_to_path(uri))  # type: ignore[no-untyped-call]
    own = path.parent if path.name == "artifacts" else path
    if own.name == owner and own.is_dir() and not any(own.rglob("*")):
        own.rmdir()


def _retrying(call: Callable[[], T]) -> T:
    """``call()``, again after a pause while it fails on lock contention."""
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except Exception as exc:
            if attempt == ATTEMPTS - 1 or not is_contention(exc):
                raise
        _pause(attempt + 1)
    raise AssertionError("unreachable")
