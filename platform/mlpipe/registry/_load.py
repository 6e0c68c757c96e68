"""Loading a version for serving, verified against its registered sha256, and its reference.

A serving process loads a version only after the artifact it downloads hashes
to the value recorded at registration.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

from mlpipe.config import Settings
from mlpipe.errors import IntegrityError, NotFound
from mlpipe.registry import _lineage, tag_names
from mlpipe.registry._client import download_tree, mlflow_errors
from mlpipe.registry._flavors import for_version
from mlpipe.registry._read import show
from mlpipe.registry._types import LoadedModel
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import pandas as pd


def load_verified(settings: Settings, name: str, version: str) -> LoadedModel:
    """Download, verify (sha256 against the registry tag) and load one version.

    Raises IntegrityError if the artifact's bytes differ from what was
    registered (or no hash was recorded), NotFound if the version is unknown,
    StoreUnavailable if the registry or its artifact store cannot be reached
    (or hands back no files).
    """
    info = show(settings, f"{name}/{version}")
    expected = info.tags.get(tag_names.ARTIFACT_SHA256)
    if not expected:
        raise IntegrityError(
            f"{name}/{version} has no {tag_names.ARTIFACT_SHA256} tag; refusing to load"
        )
    with mlflow_errors(f"{name}/{version}"), tempfile.TemporaryDirectory() as tmp:
        local = download_tree(info.source, tmp, f"artifact of {name}/{version}")
        actual = _lineage.tree_sha256(local)
        if actual != expected:
            raise IntegrityError(
                f"artifact of {name}/{version} hashes to {actual[:16]}…, but the registry "
                f"records {expected[:16]}…; refusing to load it"
            )
        flavor = for_version(info.tags)
        model = flavor.load(local, info.tags)
    threshold = float(info.tags.get(tag_names.THRESHOLD, "0.5"))
    return LoadedModel(
        name=name,
        version=str(version),
        features=info.features,
        feature_service=info.tags.get(tag_names.FEATURE_SERVICE),
        threshold=threshold,
        artifact_sha256=expected,
        model=model,
        flavor=flavor.name,
        input_schema=info.input_schema,
        task=TaskSpec.from_tags(info.tags, threshold),
    )


def load_reference(settings: Settings, name: str, version: str) -> pd.DataFrame:
    """The training reference stored at registration: model inputs plus ``label``."""
    import mlflow
    import pandas as pd

    info = show(settings, f"{name}/{version}")
    uri = info.tags.get(tag_names.REFERENCE_URI)
    if not uri:
        raise NotFound(f"{name}/{version} has no stored training reference")
    with mlflow_errors(f"reference of {name}/{version}"), tempfile.TemporaryDirectory() as tmp:
        return pd.read_parquet(mlflow.artifacts.download_artifacts(uri, dst_path=tmp))
