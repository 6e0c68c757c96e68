"""Model formats end to end (issue 21 item 5): register, verified load, scores, --to-onnx, refusals.

Each format is registered with real MLflow, loaded back through ``load_verified``
and scored against the model it came from; an ONNX version derived with
``register --to-onnx`` is served through the serving pipeline. Every refusal is
checked for its one-line message and for leaving the registry as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import registry
from mlpipe.errors import CheckFailed, InvalidInput

pytestmark = pytest.mark.integration

FEATURES = ["amount", "txn_count_7d", "age_days"]


def _dataset(home: Path, classes: int = 2) -> tuple[Path, pd.DataFrame]:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "amount": rng.gamma(2.0, 30.0, 400).round(2),
            "txn_count_7d": rng.poisson(5, 400).astype(float),
            "age_days": rng.integers(1, 900, 400).astype(float),
        }
    )
    signal = frame["amount"] / 60 + rng.normal(0, 1, 400)
    frame["label"] = np.digitize(signal, np.linspace(0.5, 2.5, classes + 1)[1:-1])
    path = home / f"train-{classes}.parquet"
    frame.to_parquet(path, index=False)
    return path, frame


def _files(home: Path, frame: pd.DataFrame) -> dict[str, tuple[Path, Any]]:
    """Model files of each format, with a function giving the source's P(class 1)."""
    import lightgbm as lgb
    import skl2onnx
    import xgboost as xgb
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    x, y = frame[FEATURES], frame["label"]
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(x, y), 15)
    booster.save_model(home / "lgb.txt")
    xgb_booster = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(x, y), 15)
    xgb_booster.save_model(home / "xgb.ubj")
    logistic = LogisticRegression(max_iter=500).fit(x.to_numpy(), y)
    proto = skl2onnx.convert_sklearn(
        logistic, initial_types=[("input", FloatTensorType([None, 3]))]
    )  # ZipMap output, as skl2onnx writes by default
    (home / "model.onnx").write_bytes(proto.SerializeToString())
    return {
        "lightgbm": (home / "lgb.txt", booster.predict),
        "xgboost": (home / "xgb.ubj", lambda a: xgb_booster.inplace_predict(a)),
        "onnx": (home / "model.onnx", lambda a: logistic.predict_proba(a)[:, 1]),
    }


@pytest.mark.formats
def test_each_format_registers_loads_verified_and_scores_like_its_source(
    home: Path, settings: Any
) -> None:
    data, frame = _dataset(home)
    x = frame[FEATURES].to_numpy()
    for flavor, (path, source) in _files(home, frame).items():
        info = registry.register(settings, f"m-{flavor}", dataset=data, model_path=path)
        assert info.tags["mlpipe.flavor"] == flavor
        assert "mlpipe.skops_trusted_types" not in info.tags  # no skops, no --trust
        assert info.features == FEATURES
        loaded = registry.load_verified(settings, f"m-{flavor}", info.version)
        tolerance = 1e-6 if flavor == "onnx" else 1e-9  # ONNX scores in float32
        np.testing.assert_allclose(loaded.predict_scores(x), source(x), atol=tolerance)


@pytest.mark.formats
def test_to_onnx_derives_a_version_with_lineage_that_serves_the_same_scores(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    from mlpipe import deployments
    from mlpipe.serving import PredictRequest, ServingRuntime

    data, frame = _dataset(home)
    path, _ = _files(home, frame)["lightgbm"]
    parent = registry.register(settings, "fraud", dataset=data, model_path=path)
    result = cli_in_process("register", "fraud", "--to-onnx", "--dataset", str(data), "--json")
    assert result.returncode == 0, result.stderr
    derived = json.loads(result.stdout)
    tags = derived["tags"]
    assert tags["mlpipe.flavor"] == "onnx" and tags["mlpipe.convert"] == "onnx"
    assert tags["mlpipe.parent_version"] == "fraud/1"
    assert tags["mlpipe.parent_artifact_sha256"] == parent.tags["mlpipe.artifact_sha256"]
    assert tags["mlpipe.converter"].startswith("onnxmltools==")
    assert tags["mlpipe.data_sha256"] == parent.tags["mlpipe.data_sha256"]
    assert tags["mlpipe.eval_dataset"] == data.name
    delta = float(tags["mlpipe.metric.max_abs_score_delta"])
    assert delta <= float(tags["mlpipe.convert_tolerance"]) == 1e-4

    x = frame[FEATURES].to_numpy()
    before = registry.load_verified(settings, "fraud", "1").predict_scores(x)
    onnx_version = registry.load_verified(settings, "fraud", "2")
    assert np.max(np.abs(onnx_version.predict_scores(x) - before)) <= delta

    deployments.deploy(settings, "fraud", "2")
    runtime = ServingRuntime(settings).start()
    try:
        assert runtime.loader.wait_ready(60)
        features = dict(zip(FEATURES, x[0].tolist(), strict=True))
        request = PredictRequest(model="fraud", entity={}, features=features, request_id="r1")
        (answer,) = runtime.pipeline.predict_batch([request])
    finally:
        runtime.close()
    assert answer["version"] == "2"
    assert answer["score"] == pytest.approx(float(before[0]), abs=delta + 1e-9)


@pytest.mark.formats
def test_to_onnx_beyond_the_tolerance_or_of_an_onnx_version_registers_nothing(
    home: Path, settings: Any
) -> None:
    data, frame = _dataset(home)
    path, _ = _files(home, frame)["xgboost"]
    registry.register(settings, "fraud", dataset=data, model_path=path)
    with pytest.raises(CheckFailed, match=r"scores up to .* away from it on train-2.parquet"):
        registry.register_onnx(settings, "fraud", dataset=data, tolerance=0.0)
    onnx_path, _ = _files(home, frame)["onnx"]
    registry.register(settings, "graph", dataset=data, model_path=onnx_path)
    with pytest.raises(InvalidInput, match="graph/1 is stored as onnx; --to-onnx converts"):
        registry.register_onnx(settings, "graph", dataset=data)
    assert registry.show(settings, "fraud").version == "1"
    assert registry.show(settings, "graph").version == "1"


def test_a_multiclass_model_registers_as_multiclass_and_never_as_binary(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    data, frame = _dataset(home, classes=3)
    model = LogisticRegression(max_iter=500).fit(frame[FEATURES], frame["label"])
    joblib.dump(model, home / "multi.joblib")
    args = ("register", "m3", "--model", "multi.joblib", "--dataset", str(data))
    result = cli_in_process(*args, "--task", "binary")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --task binary does not match the model: this LogisticRegression has 3 classes, "
        "so it is multiclass (3 classes)"
    )
    assert registry.list_models(settings) == []
    result = cli_in_process(*args, "--json")
    assert result.returncode == 0, result.stderr
    tags = json.loads(result.stdout)["tags"]
    assert (tags["mlpipe.task"], tags["mlpipe.classes"]) == ("multiclass", "[0, 1, 2]")


def test_dataset_mismatches_are_one_line_and_register_nothing(home: Path, settings: Any) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    data, frame = _dataset(home)
    named = LogisticRegression(max_iter=500).fit(frame[FEATURES], frame["label"])
    joblib.dump(named, home / "named.joblib")
    unnamed = LogisticRegression(max_iter=500).fit(frame[FEATURES].to_numpy(), frame["label"])
    joblib.dump(unnamed, home / "unnamed.joblib")
    short = home / "short.parquet"
    frame.drop(columns=["age_days"]).to_parquet(short, index=False)

    with pytest.raises(InvalidInput, match=r"dataset lacks column\(s\) the model needs: age_days"):
        registry.register(settings, "m", dataset=short, model_path=home / "named.joblib")
    with pytest.raises(InvalidInput) as raised:
        registry.register(settings, "m", dataset=short, model_path=home / "unnamed.joblib")
    assert str(raised.value).startswith(
        "the sklearn model fails on the dataset's first rows, given the 2 columns amount, "
        "txn_count_7d: ValueError: X has 2 features, but LogisticRegression is expecting 3"
    )
    with pytest.raises(InvalidInput) as raised:
        registry.register(settings, "m", dataset=data, model_path=home / "named.joblib", label="y")
    assert str(raised.value).startswith("the dataset has no label column 'y' (name it with")
    assert registry.list_models(settings) == []


def _column_transformer_project(home: Path) -> tuple[Path, Path, pd.DataFrame, Any]:
    """A Pipeline(ColumnTransformer(scaled numbers, one-hot strings), LogisticRegression)
    on a frame with named numeric and string columns, saved as joblib and Parquet."""
    import joblib
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(3)
    n = 300
    frame = pd.DataFrame(
        {
            "amount": rng.gamma(2.0, 30.0, n).round(2),
            "visits": rng.poisson(4, n).astype(float),
            "city": rng.choice(["lyon", "oslo", "quito"], n),
            "plan": rng.choice(["free", "pro"], n),
        }
    )
    signal = frame["amount"] / 60 + (frame["city"] == "oslo") + rng.normal(0, 1, n)
    frame["label"] = (signal > 1.5).astype(int)
    pipeline = Pipeline(
        [
            (
                "columns",
                ColumnTransformer(
                    [
                        ("numbers", StandardScaler(), ["amount", "visits"]),
                        ("strings", OneHotEncoder(handle_unknown="ignore"), ["city", "plan"]),
                    ]
                ),
            ),
            ("model", LogisticRegression(max_iter=500)),
        ]
    ).fit(frame.drop(columns="label"), frame["label"])
    model, data = home / "m.joblib", home / "d.parquet"
    joblib.dump(pipeline, model)
    frame.to_parquet(data, index=False)
    return model, data, frame, pipeline


@pytest.mark.formats
def test_to_onnx_converts_a_column_transformer_pipeline_one_graph_input_per_column(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    """Issue 28 item 7: named numeric and string columns, one input each; the parent's
    metrics carried; scored as the parent within the recorded tolerance, over serving too."""
    from mlpipe import deployments
    from mlpipe.serving import PredictRequest, ServingRuntime

    model, data, frame, pipeline = _column_transformer_project(home)
    result = cli_in_process(
        "register", "churn", "--model", str(model), "--dataset", str(data), "--to-onnx", "--json"
    )
    assert result.returncode == 0, result.stderr
    tags = json.loads(result.stdout)["tags"]
    assert tags["mlpipe.flavor"] == "onnx" and tags["mlpipe.parent_version"] == "churn/1"
    parent = registry.show(settings, "churn/1")
    for key, value in parent.tags.items():
        if key.startswith("mlpipe.metric.") or key == "mlpipe.metrics_on":
            assert tags[key] == value
    assert "mlpipe.metric.auc" in tags
    delta = float(tags["mlpipe.metric.max_abs_score_delta"])
    assert delta <= float(tags["mlpipe.convert_tolerance"])

    derived = registry.load_verified(settings, "churn", "2")
    graph_inputs = [name for name, _ in derived.model.inputs]
    assert graph_inputs == ["amount", "visits", "city", "plan"]
    expected = pipeline.predict_proba(frame.drop(columns="label"))[:, 1]
    scores = derived.predict_scores(derived.inputs_from(frame))
    assert np.max(np.abs(scores - expected)) <= delta + 1e-12

    deployments.deploy(settings, "churn", "2")
    runtime = ServingRuntime(settings).start()
    try:
        assert runtime.loader.wait_ready(60)
        row = frame.drop(columns="label").iloc[0].to_dict()
        request = PredictRequest(model="churn", entity={}, features=row, request_id="r1")
        (answer,) = runtime.pipeline.predict_batch([request])
    finally:
        runtime.close()
    assert answer["version"] == "2"
    assert answer["score"] == pytest.approx(float(expected[0]), abs=delta + 1e-9)


@pytest.mark.formats
def test_to_onnx_of_a_model_without_a_converter_is_one_line_and_registers_nothing(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    import joblib
    import xgboost as xgb
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data, frame = _dataset(home)
    pipeline = make_pipeline(StandardScaler(), xgb.XGBClassifier(n_estimators=5, n_jobs=1))
    joblib.dump(pipeline.fit(frame[FEATURES], frame["label"]), home / "xgb.joblib")
    args = ("register", "fraud", "--dataset", str(data), "--to-onnx")
    result = cli_in_process(*args[:2], "--model", str(home / "xgb.joblib"), *args[2:])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: the sklearn model does not convert to ONNX: the ONNX converters have no "
        "converter for xgboost.sklearn.XGBClassifier"
    ]
    assert "initial_types" not in result.stderr and "sklearn-onnx" not in result.stderr
    assert registry.list_models(settings) == []
