"""Loading a version verified against its registered sha256, and its training reference
(an MLflow file store in tmp_path, a two-tree LightGBM Booster as the artifact)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe.config import Settings
from mlpipe.errors import IntegrityError, NotFound, StoreUnavailable
from mlpipe.registry import client, load_reference, load_verified, tag_names
from mlpipe.registry._lineage import tree_sha256
from tests.unit.registry.boosters import booster_dir

FEATURES = ["amount", "txn_count_7d"]


@pytest.fixture
def store(home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``fraud`` v1: a LightGBM Booster with its sha256, features, threshold and task tags."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    settings = Settings(home=home, registry_uri=(home / "mlruns").as_uri())
    artifact = booster_dir(home / "artifact", FEATURES)
    c = client(settings)
    c.create_registered_model("fraud")
    tags = {
        tag_names.FLAVOR: "lightgbm",
        tag_names.ARTIFACT_SHA256: tree_sha256(artifact),
        tag_names.FEATURES: json.dumps(FEATURES),
        tag_names.THRESHOLD: "0.3",
        tag_names.FEATURE_SERVICE: "fraud_v1",
    }
    c.create_model_version("fraud", artifact.as_uri(), tags=tags)
    return settings


def test_load_verified_hands_back_the_version_ready_to_score(store: Settings) -> None:
    loaded = load_verified(store, "fraud", "1")
    assert (loaded.name, loaded.version, loaded.flavor) == ("fraud", "1", "lightgbm")
    assert loaded.features == FEATURES
    assert (loaded.threshold, loaded.task.threshold) == (0.3, 0.3)
    assert loaded.feature_service == "fraud_v1"
    assert loaded.artifact_sha256 == tree_sha256(store.home / "artifact")
    x = np.array([[-2.0, 1.0], [2.0, 1.0]])
    scores = loaded.predict_scores(x)
    assert scores.shape == (2,)
    assert scores[0] < scores[1]


def test_an_artifact_changed_after_registration_is_refused(store: Settings) -> None:
    artifact = store.home / "artifact"
    recorded = tree_sha256(artifact)
    with (artifact / "model.lgb").open("a") as fh:
        fh.write("\n")
    with pytest.raises(IntegrityError) as raised:
        load_verified(store, "fraud", "1")
    assert str(raised.value) == (
        f"artifact of fraud/1 hashes to {tree_sha256(artifact)[:16]}…, but the registry "
        f"records {recorded[:16]}…; refusing to load it"
    )


def test_a_version_without_a_recorded_hash_is_refused(store: Settings) -> None:
    client(store).delete_model_version_tag("fraud", "1", tag_names.ARTIFACT_SHA256)
    refused = r"^fraud/1 has no mlpipe.artifact_sha256 tag; refusing to load$"
    with pytest.raises(IntegrityError, match=refused):
        load_verified(store, "fraud", "1")


def test_an_artifact_that_is_gone_is_the_store_unavailable_not_tampering(store: Settings) -> None:
    (store.home / "artifact" / "model.lgb").unlink()
    gone = r"^artifact of fraud/1: the artifact store returned no files for "
    with pytest.raises(StoreUnavailable, match=gone):
        load_verified(store, "fraud", "1")


def test_an_unknown_version_is_not_found(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^fraud has no version 2 \(versions: 1\)$"):
        load_verified(store, "fraud", "2")


def test_load_reference_reads_the_stored_frame(store: Settings) -> None:
    frame = pd.DataFrame({"amount": [1.0, 2.0], "txn_count_7d": [3, 4], "label": [0, 1]})
    path = store.home / "reference.parquet"
    frame.to_parquet(path, index=False)
    client(store).set_model_version_tag("fraud", "1", tag_names.REFERENCE_URI, path.as_uri())
    pd.testing.assert_frame_equal(load_reference(store, "fraud", "1"), frame)


def test_load_reference_of_a_version_without_one_is_not_found(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^fraud/1 has no stored training reference$"):
        load_reference(store, "fraud", "1")
