"""A derived version (quantized, converted to ONNX): its parent, and the lineage it carries.

A derived version keeps the parent's training lineage (data, features, feature
service, threshold, commit) and adds where it came from (``mlpipe.parent_version``,
``mlpipe.parent_artifact_sha256``) and what it was checked on
(``mlpipe.eval_dataset``, ``mlpipe.eval_data_sha256``); each kind adds its own tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlpipe.config import Settings
from mlpipe.registry import _lineage, _tags
from mlpipe.registry._load import load_verified
from mlpipe.registry._read import show
from mlpipe.registry._types import LoadedModel, VersionInfo

# Tags of the parent that describe its training, carried to the derived version.
_INHERITED = (
    _tags.DATA_SHA256,
    _tags.DATASET,
    _tags.FEATURES,
    _tags.LABEL,
    _tags.FEATURE_SERVICE,
    _tags.FEATURE_SERVICE_SHA256,
    _tags.THRESHOLD,
    _tags.GIT_COMMIT,
)


@dataclass(frozen=True)
class Parent:
    """The version a derived one is made from: its registry entry and its verified model."""

    name: str
    version: str
    info: VersionInfo
    loaded: LoadedModel


def load_parent(settings: Settings, name: str, version: str | None) -> Parent:
    """Version ``version`` (default: the latest) of ``name``, verified and loaded."""
    version = version or show(settings, name).version
    info = show(settings, f"{name}/{version}")
    return Parent(name, version, info, load_verified(settings, name, version))


def lineage_tags(parent: Parent, dataset: Path) -> dict[str, str]:
    """The parent's training tags, where the version came from and what it was checked on."""
    tags = {k: parent.info.tags[k] for k in _INHERITED if k in parent.info.tags}
    tags.update(
        {
            _tags.PARENT_VERSION: f"{parent.name}/{parent.version}",
            _tags.PARENT_ARTIFACT_SHA256: parent.loaded.artifact_sha256,
            _tags.EVAL_DATASET: dataset.name,
            _tags.EVAL_DATA_SHA256: _lineage.file_sha256(dataset),
        }
    )
    return tags
