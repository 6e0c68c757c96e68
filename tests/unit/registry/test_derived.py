"""A derived version's parent, loaded verified, and the lineage the derived version carries
(an MLflow file store in tmp_path, a two-tree LightGBM Booster as the parent's artifact)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mlpipe.config import Settings
from mlpipe.errors import IntegrityError, NotFound
from mlpipe.registry import client, tag_names
from mlpipe.registry._derived import lineage_tags, load_parent
from mlpipe.registry._lineage import tree_sha256
from tests.unit.registry.boosters import booster_dir

TRAINING = {
    tag_names.DATA_SHA256: "d" * 64,
    tag_names.DATASET: "train.parquet",
    tag_names.FEATURES: json.dumps(["a", "b"]),
    tag_names.LABEL: "label",
    tag_names.THRESHOLD: "0.4",
    tag_names.GIT_COMMIT: "abc123+dirty",
}


@pytest.fixture
def store(home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``fraud`` v1 and v2, the same Booster, v2 with its training lineage and more tags."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    settings = Settings(home=home, registry_uri=(home / "mlruns").as_uri())
    artifact = booster_dir(home / "artifact", ["a", "b"])
    storage = {tag_names.FLAVOR: "lightgbm", tag_names.ARTIFACT_SHA256: tree_sha256(artifact)}
    c = client(settings)
    c.create_registered_model("fraud")
    c.create_model_version("fraud", artifact.as_uri(), tags=storage)
    c.create_model_version(
        "fraud", artifact.as_uri(), tags={**storage, **TRAINING, "mlpipe.metric.auc": "0.9"}
    )
    return settings


def test_load_parent_without_a_version_is_the_latest_verified(store: Settings) -> None:
    parent = load_parent(store, "fraud", None)
    assert (parent.name, parent.version, parent.info.version) == ("fraud", "2", "2")
    assert parent.loaded.artifact_sha256 == tree_sha256(store.home / "artifact")
    assert parent.loaded.threshold == 0.4


def test_load_parent_of_a_named_version(store: Settings) -> None:
    parent = load_parent(store, "fraud", "1")
    assert (parent.version, parent.loaded.version, parent.loaded.threshold) == ("1", "1", 0.5)


def test_load_parent_refuses_a_tampered_or_missing_parent(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^fraud has no version 5 \(versions: 1, 2\)$"):
        load_parent(store, "fraud", "5")
    (store.home / "artifact" / "model.lgb").write_text("tampered")
    with pytest.raises(IntegrityError, match="refusing to load it"):
        load_parent(store, "fraud", "2")


def test_lineage_tags_carry_the_training_tags_and_name_parent_and_holdout(
    store: Settings, tmp_path: Path
) -> None:
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("a,b,label\n1,2,0\n")
    parent = load_parent(store, "fraud", "2")
    assert lineage_tags(parent, holdout) == {
        **TRAINING,
        tag_names.PARENT_VERSION: "fraud/2",
        tag_names.PARENT_ARTIFACT_SHA256: tree_sha256(store.home / "artifact"),
        tag_names.EVAL_DATASET: "holdout.csv",
        tag_names.EVAL_DATA_SHA256: hashlib.sha256(holdout.read_bytes()).hexdigest(),
    }


def test_lineage_tags_leave_out_what_the_parent_does_not_record(
    store: Settings, tmp_path: Path
) -> None:
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("a,b,label\n")
    tags = lineage_tags(load_parent(store, "fraud", "1"), holdout)
    assert sorted(tags) == sorted(
        [
            tag_names.PARENT_VERSION,
            tag_names.PARENT_ARTIFACT_SHA256,
            tag_names.EVAL_DATASET,
            tag_names.EVAL_DATA_SHA256,
        ]
    )
    assert tags[tag_names.PARENT_VERSION] == "fraud/1"
