"""Registration with lineage, reading versions back, and verified loading (real MLflow)."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from mlpipe import registry
from mlpipe.config import load_settings
from mlpipe.errors import IntegrityError, InvalidInput, NotFound
from tests.conftest import train_toy_model

pytestmark = pytest.mark.integration


def test_register_records_lineage(home: Path) -> None:
    model_path, data_path = train_toy_model(home / "in")
    info = registry.register(
        load_settings(), "fraud", dataset=data_path, model_path=model_path, metrics={"auc": 0.91}
    )
    assert info.version == "1"
    assert info.tags["mlpipe.data_sha256"] == hashlib.sha256(data_path.read_bytes()).hexdigest()
    assert json.loads(info.tags["mlpipe.features"]) == ["amount", "txn_count_7d"]
    assert len(info.tags["mlpipe.artifact_sha256"]) == 64
    assert "lightgbm.sklearn.LGBMClassifier" in json.loads(info.tags["mlpipe.skops_trusted_types"])
    assert info.metrics["auc"] == 0.91  # the metric given wins over the one measured
    assert set(info.metrics) == {"auc", "recall", "precision", "log_loss"}  # measured
    assert info.tags["mlpipe.metrics_on"] == f"dataset {data_path.name} (the registration dataset)"
    assert registry.load_reference(load_settings(), "fraud", "1").columns.tolist() == [
        "amount",
        "txn_count_7d",
        "label",
    ]


def test_loaded_model_scores_like_the_original(registered_home: Path) -> None:
    import joblib
    import pandas as pd

    settings = load_settings()
    loaded = registry.load_verified(settings, "fraud", "1")
    original = joblib.load(registered_home / "inputs" / "model-1.joblib")
    frame = pd.read_parquet(registered_home / "inputs" / "train-1.parquet")[loaded.features]
    expected = original.predict_proba(frame)[:, 1]
    np.testing.assert_allclose(loaded.predict_scores(frame.to_numpy()), expected, rtol=1e-9)


def test_tampered_artifact_is_refused(home: Path) -> None:
    model_path, data_path = train_toy_model(home / "in")
    settings = load_settings()
    registry.register(settings, "fraud", dataset=data_path, model_path=model_path)
    [skops_file] = list((home / ".mlpipe" / "artifacts").rglob("model.skops"))
    skops_file.write_bytes(skops_file.read_bytes() + b"\0")
    with pytest.raises(IntegrityError, match=r"fraud/1 hashes to .* refusing to load"):
        registry.load_verified(settings, "fraud", "1")


def test_bad_inputs_register_nothing(home: Path) -> None:
    model_path, data_path = train_toy_model(home / "in")
    settings = load_settings()
    not_a_model = home / "notes.pkl"
    not_a_model.write_text("this is not a pickle")
    with pytest.raises(InvalidInput, match=r"notes.pkl is not a model file"):
        registry.register(settings, "fraud", dataset=data_path, model_path=not_a_model)
    with pytest.raises(NotFound, match=r"dataset file .*missing.parquet does not exist"):
        registry.register(
            settings, "fraud", dataset=home / "missing.parquet", model_path=model_path
        )
    with pytest.raises(InvalidInput, match=r"the dataset has no label column 'y'"):
        registry.register(settings, "fraud", dataset=data_path, model_path=model_path, label="y")
    assert registry.list_models(settings) == []


def _double(x):  # type: ignore[no-untyped-def]
    return x * 2


def test_untrusted_type_is_refused_unless_trusted(home: Path) -> None:
    import joblib
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    _, data_path = train_toy_model(home / "in")
    frame = pd.read_parquet(data_path)
    pipe = make_pipeline(FunctionTransformer(_double), LogisticRegression())
    pipe.fit(frame[["amount", "txn_count_7d"]], frame["label"])
    joblib.dump(pipe, home / "custom.joblib")
    settings = load_settings()
    custom = f"{__name__}._double"
    with pytest.raises(InvalidInput, match=rf"does not trust by default: {custom} \(pass --trust"):
        registry.register(settings, "fraud", dataset=data_path, model_path=home / "custom.joblib")
    assert registry.list_models(settings) == []
    info = registry.register(
        settings, "fraud", dataset=data_path, model_path=home / "custom.joblib", trust=(custom,)
    )
    assert custom in json.loads(info.tags["mlpipe.skops_trusted_types"])


def test_show_by_alias_and_unknown_refs(registered_home: Path) -> None:
    settings = load_settings()
    assert registry.show(settings, "fraud").version == "2"
    assert registry.show(settings, "fraud/1").version == "1"
    with pytest.raises(NotFound, match=r"fraud has no version 7 \(versions: 1, 2\)"):
        registry.show(settings, "fraud/7")
    with pytest.raises(NotFound, match=r"no registered model named 'nope'"):
        registry.show(settings, "nope")
