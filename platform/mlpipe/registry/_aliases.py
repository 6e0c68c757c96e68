"""Mirroring a deployment's aliases (``@champion @canary @shadow @previous``) onto MLflow.

The control plane is the source of truth; the aliases follow it, so
``models:/NAME@champion`` is right for every MLflow-native tool. The registry
takes the aliases as plain values and knows nothing of deployment records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from mlpipe.config import Settings
from mlpipe.registry._client import client, mlflow_errors

if TYPE_CHECKING:
    from mlflow import MlflowClient

_UPSERT_ATTEMPTS = 3
_LOST_INSERT = re.compile(r"UNIQUE constraint failed|duplicate key value|IntegrityError")


def mirror_aliases(
    settings: Settings, model: str, aliases: Mapping[str, str | None], *, generation: int
) -> None:
    """Set each alias of ``model`` to its version, and delete those mapped to None.

    ``generation`` is the deployment generation the aliases come from; it only
    names it in the StoreUnavailable raised when MLflow cannot be updated.
    """
    from mlflow.exceptions import MlflowException

    c = client(settings)
    with mlflow_errors(
        f"generation {generation} of {model} is committed, but MLflow "
        f"aliases could not be mirrored (`mlpipe status {model}` re-mirrors them)"
    ):
        for alias, version in aliases.items():
            if version is not None:
                _set_alias(c, model, alias, version)
                continue
            try:
                c.delete_registered_model_alias(model, alias)
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise


def _set_alias(c: MlflowClient, model: str, alias: str, version: str) -> None:
    """Set one alias. MLflow's SQL store upserts by select-then-insert, so two writers
    creating the same alias at once make one fail on the primary key: the row exists
    then, and the same call again is an update."""
    from mlflow.exceptions import MlflowException

    for attempt in range(_UPSERT_ATTEMPTS):
        try:
            c.set_registered_model_alias(model, alias, version)
            return
        except MlflowException as exc:
            if attempt == _UPSERT_ATTEMPTS - 1 or not _LOST_INSERT.search(str(exc)):
                raise


def read_aliases(settings: Settings, model: str, names: Iterable[str]) -> dict[str, str | None]:
    """Alias → version that MLflow holds now for each of ``names`` (None: not set).

    Raises NotFound for an unknown model, StoreUnavailable when MLflow cannot be read.
    """
    with mlflow_errors(f"aliases of {model}"):
        held = client(settings).get_registered_model(model).aliases
    return {name: (str(held[name]) if name in held else None) for name in names}
