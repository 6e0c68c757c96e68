"""Mirroring a deployment's aliases (``@champion @canary @shadow @previous``) onto MLflow.

The control plane is the source of truth; the aliases follow it, so
``models:/NAME@champion`` is right for every MLflow-native tool. The registry
takes the aliases as plain values and knows nothing of deployment records.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlpipe.config import Settings
from mlpipe.registry._client import client, mlflow_errors


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
        "aliases could not be mirrored (the next deploy/promote/rollback re-mirrors them)"
    ):
        for alias, version in aliases.items():
            if version is not None:
                c.set_registered_model_alias(model, alias, version)
                continue
            try:
                c.delete_registered_model_alias(model, alias)
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
