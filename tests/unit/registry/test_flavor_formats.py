"""Model formats (issue 21 item 5): reading each file kind, scoring it, refusing what is not served.

No registry here: each flavor's reading, task inference and scorer against the
real library that made the model (registration end to end is in
tests/integration/test_formats.py; multiclass and regression models of every
flavor in test_task_inference.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlpipe.errors import InvalidInput
from mlpipe.registry import convert_to_onnx
from mlpipe.registry._candidate import read_candidate
from mlpipe.registry._flavors import for_candidate


def _data(classes: int = 2, rows: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4))
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], np.linspace(-1, 1, classes + 1)[1:-1])
    return x, y


def _lgb_booster(classes: int = 2) -> Any:
    import lightgbm as lgb

    x, y = _data(classes)
    params = {"objective": "binary" if classes == 2 else "multiclass", "verbose": -1}
    if classes > 2:
        params["num_class"] = classes
    return lgb.train(params, lgb.Dataset(x, y), 10)


def _xgb_booster(objective: str = "binary:logistic", classes: int = 2) -> Any:
    import xgboost as xgb

    x, y = _data(classes)
    params: dict[str, Any] = {"objective": objective, "nthread": 1}
    if classes > 2:
        params["num_class"] = classes
    return xgb.train(params, xgb.DMatrix(x, y), 10)


def _scores(model: Any, x: np.ndarray) -> np.ndarray:
    flavor = for_candidate(model)
    return flavor.scorer(model, flavor.task_of(model, None))(x)


def test_lightgbm_text_and_pickled_boosters_score_like_the_booster(tmp_path: Path) -> None:
    import joblib

    booster = _lgb_booster()
    booster.save_model(tmp_path / "model.txt")
    joblib.dump(booster, tmp_path / "model.joblib")
    x, _ = _data(seed=1)
    for name in ("model.txt", "model.joblib"):
        model = read_candidate(tmp_path / name)
        assert for_candidate(model).name == "lightgbm"
        np.testing.assert_allclose(_scores(model, x), booster.predict(x), rtol=1e-12)


@pytest.mark.formats
def test_xgboost_json_ubj_and_classifier_score_like_predict_proba(tmp_path: Path) -> None:
    import joblib
    import xgboost as xgb

    x, y = _data()
    classifier = xgb.XGBClassifier(n_estimators=10, n_jobs=1).fit(x, y)
    classifier.save_model(tmp_path / "model.json")
    classifier.save_model(tmp_path / "model.ubj")
    joblib.dump(classifier, tmp_path / "model.joblib")
    expected = classifier.predict_proba(x)[:, 1]
    for name in ("model.json", "model.ubj", "model.joblib"):
        model = read_candidate(tmp_path / name)
        assert for_candidate(model).name == "xgboost"  # its own flavor: no skops, no --trust
        np.testing.assert_allclose(_scores(model, x), expected, rtol=1e-6)


@pytest.mark.formats
def test_xgboost_early_stopping_scores_up_to_the_best_iteration() -> None:
    import xgboost as xgb

    x, y = _data()
    xv, yv = _data(seed=3)
    classifier = xgb.XGBClassifier(n_estimators=200, early_stopping_rounds=2, n_jobs=1)
    classifier.fit(x, y, eval_set=[(xv, yv)], verbose=False)
    assert classifier.best_iteration < 199
    np.testing.assert_allclose(
        _scores(classifier, xv), classifier.predict_proba(xv)[:, 1], rtol=1e-6
    )


@pytest.mark.formats
@pytest.mark.parametrize("zipmap", [False, True])
def test_onnx_file_scores_like_its_source_with_tensor_or_zipmap_output(
    tmp_path: Path, zipmap: bool
) -> None:
    import skl2onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    x, y = _data()
    source = LogisticRegression().fit(x, y)
    proto = skl2onnx.convert_sklearn(
        source, initial_types=[("input", FloatTensorType([None, 4]))], options={"zipmap": zipmap}
    )
    (tmp_path / "model.onnx").write_bytes(proto.SerializeToString())
    model = read_candidate(tmp_path / "model.onnx")
    assert for_candidate(model).name == "onnx"
    np.testing.assert_allclose(_scores(model, x), source.predict_proba(x)[:, 1], atol=1e-6)


@pytest.mark.formats
@pytest.mark.parametrize("flavor", ["sklearn", "lightgbm", "xgboost"])
def test_converted_graphs_agree_with_their_source(flavor: str) -> None:
    from sklearn.ensemble import RandomForestClassifier

    x, y = _data()
    source = {
        "sklearn": lambda: RandomForestClassifier(20, random_state=0).fit(x, y),
        "lightgbm": _lgb_booster,
        "xgboost": _xgb_booster,
    }[flavor]()
    proto, converter = convert_to_onnx(flavor, source, 4)
    assert converter.startswith(("skl2onnx==", "onnxmltools=="))
    delta = np.max(np.abs(_scores(proto, x) - for_candidate(source).scorer(source)(x)))
    assert delta < 1e-5


@pytest.mark.formats
def test_objectives_mlpipe_does_not_serve_are_refused_naming_what_it_serves() -> None:
    from sklearn.svm import LinearSVC

    x, y = _data()
    refused = [
        (_xgb_booster("binary:hinge"), "this XGBoost model's objective is binary:hinge; mlpipe "),
        (_xgb_booster("rank:pairwise"), "this XGBoost model's objective is rank:pairwise; mlpipe"),
    ]
    for model, message in refused:
        with pytest.raises(InvalidInput, match=message) as raised:
            for_candidate(model).task_of(model, None)
        assert "multi:softprob/multi:softmax" in str(raised.value)
        assert "\n" not in str(raised.value)
    with pytest.raises(
        InvalidInput,
        match="a LinearSVC is not a model mlpipe registers: it "
        "registers binary and multiclass classifiers",
    ):
        for_candidate(LinearSVC().fit(x, y))  # a classifier without probabilities


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param(
            "model.onnx",
            b"not a graph",
            "model.onnx is not a valid ONNX model",
            marks=pytest.mark.formats,  # read with onnx
        ),
        ("model.txt", b"hello", "model.txt is not a LightGBM model file"),
        pytest.param(
            "model.json",
            b'{"a": 1}',
            "model.json is not an XGBoost model file",
            marks=pytest.mark.formats,  # read with xgboost
        ),
        (
            "model.bin",
            b"8\x00\x01",
            "model.bin is not a model file mlpipe reads: give a pickle/joblib file, LightGBM "
            ".txt, XGBoost .json/.ubj, ONNX .onnx, TorchScript .pt/.pth, or an MLflow model dir",
        ),
    ],
)
def test_an_unreadable_file_is_one_line_naming_what_is_supported(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InvalidInput) as raised:
        read_candidate(tmp_path / name)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.formats
def test_a_pipeline_holding_xgboost_needs_no_trust_but_does_not_convert() -> None:
    import xgboost as xgb
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from mlpipe.registry._sklearn_flavor import trusted_types_for

    x, y = _data()
    pipeline = make_pipeline(StandardScaler(), xgb.XGBClassifier(n_estimators=5, n_jobs=1))
    pipeline.fit(x, y)
    assert for_candidate(pipeline).name == "sklearn"
    assert "xgboost.sklearn.XGBClassifier" in trusted_types_for(pipeline, ())
    no_converter = "converters have no converter for xgboost.sklearn.XGBClassifier$"
    with pytest.raises(
        InvalidInput, match="the sklearn model does not convert to ONNX: the ONNX " + no_converter
    ):
        convert_to_onnx("sklearn", pipeline, 4)
