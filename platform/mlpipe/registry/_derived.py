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
from mlpipe.registry import _lineage, tag_names
from mlpipe.registry._load import load_verified
from mlpipe.registry._read import show
from mlpipe.registry._types import LoadedModel, VersionInfo

# Tags of the parent that describe its training, carried to the derived version.
_INHERITED = (
    tag_names.DATA_SHA256,
    tag_names.DATASET,
    tag_names.FEATURES,
    tag_names.LABEL,
    tag_names.FEATURE_SERVICE,
    tag_names.FEATURE_SERVICE_SHA256,
    tag_names.THRESHOLD,
    tag_names.GIT_COMMIT,
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
            tag_names.PARENT_VERSION: f"{parent.name}/{parent.version}",
            tag_names.PARENT_ARTIFACT_SHA256: parent.loaded.artifact_sha256,
            tag_names.EVAL_DATASET: dataset.name,
            tag_names.EVAL_DATA_SHA256: _lineage.file_sha256(dataset),
        }
    )
    return tags
