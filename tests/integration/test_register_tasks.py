"""Registering binary, multiclass and regression models (issue 21 item 4), real MLflow.

Each model is registered from a file, loaded back verified and scored against
the model it came from; its task is recorded as tags. ``--to-onnx`` converts
multiclass and regression versions within tolerance and carries the task. Each
refusal is one line, exit 2, and registers nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import registry
from mlpipe.errors import CheckFailed, InvalidInput

pytestmark = pytest.mark.integration


def _bundled(home: Path, loader: str, names: list[str] | None = None) -> tuple[Path, pd.DataFrame]:
    """scikit-learn's bundled set ``loader`` as a CSV (features and ``target``; class names
    in place of the class numbers when ``names`` are given)."""
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, loader)(as_frame=True)
    frame = bunch.frame.rename(columns=lambda c: c.replace(" ", "_").replace("/", "_"))
    if names is not None:
        frame["target"] = np.asarray(names)[frame["target"].to_numpy()]
    path = home / f"{loader}.csv"
    frame.to_csv(path, index=False)
    return path, frame


def _features(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c != "target"]


def _saved(home: Path, name: str, model: Any) -> Path:
    import joblib

    joblib.dump(model, home / name)
    return home / name


def test_each_task_registers_its_tags_and_loads_scoring_like_the_model(
    home: Path, settings: Any
) -> None:
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    wine_names = ["barolo", "grignolino", "barbera"]
    cases = {
        "cancer": (_bundled(home, "load_breast_cancer"), LogisticRegression(max_iter=5000)),
        "iris": (_bundled(home, "load_iris"), LogisticRegression(max_iter=1000)),
        "wine": (
            _bundled(home, "load_wine", wine_names),
            make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        ),
        "diabetes": (_bundled(home, "load_diabetes"), make_pipeline(StandardScaler(), Ridge())),
    }
    expected_tags = {
        "cancer": {"mlpipe.task": "binary", "mlpipe.classes": "[0, 1]"},
        "iris": {"mlpipe.task": "multiclass", "mlpipe.classes": "[0, 1, 2]"},
        "wine": {
            "mlpipe.task": "multiclass",
            "mlpipe.classes": '["barbera", "barolo", "grignolino"]',  # the model's order
        },
        "diabetes": {"mlpipe.task": "regression"},
    }
    for name, ((data, frame), model) in cases.items():
        x = frame[_features(frame)]
        model.fit(x, frame["target"])
        info = registry.register(
            settings, name, dataset=data, model_path=_saved(home, f"{name}.joblib", model),
            label="target",
        )  # fmt: skip
        task_tags = {k: v for k, v in info.tags.items() if k in ("mlpipe.task", "mlpipe.classes")}
        assert task_tags == expected_tags[name]
        assert ("mlpipe.threshold" in info.tags) == (name == "cancer")
        loaded = registry.load_verified(settings, name, info.version)
        assert loaded.task == info.task and loaded.task.task == info.tags["mlpipe.task"]
        out = loaded.predict_scores(x.to_numpy(dtype=np.float64))
        if name == "diabetes":
            want = model.predict(x)
        elif name == "cancer":
            want = model.predict_proba(x)[:, 1]
        else:
            want = model.predict_proba(x)
        np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-12)
        reference = registry.load_reference(settings, name, info.version)
        assert reference["label"].dtype == frame["target"].dtype  # names stay names
        assert set(reference["label"]) <= set(frame["target"])


@pytest.mark.formats
def test_booster_files_register_as_multiclass_and_regression(home: Path, settings: Any) -> None:
    import lightgbm as lgb
    import xgboost as xgb

    iris, iris_frame = _bundled(home, "load_iris")
    diabetes, diabetes_frame = _bundled(home, "load_diabetes")
    xi, yi = iris_frame[_features(iris_frame)], iris_frame["target"]
    xd, yd = diabetes_frame[_features(diabetes_frame)], diabetes_frame["target"]
    params = {"objective": "multiclass", "num_class": 3, "verbose": -1}
    lgb_multi = lgb.train(params, lgb.Dataset(xi, yi), 8)
    lgb_multi.save_model(home / "multi.txt")
    xgb_reg = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(xd, yd), 8)
    xgb_reg.save_model(home / "reg.json")

    multi = registry.register(
        settings, "lgb-iris", dataset=iris, model_path=home / "multi.txt", label="target"
    )
    reg = registry.register(
        settings, "xgb-diabetes", dataset=diabetes, model_path=home / "reg.json", label="target"
    )
    assert (multi.tags["mlpipe.flavor"], multi.task.task, multi.task.classes) == (
        "lightgbm",
        "multiclass",
        (0, 1, 2),
    )
    assert (reg.tags["mlpipe.flavor"], reg.task.task) == ("xgboost", "regression")
    loaded = registry.load_verified(settings, "lgb-iris", "1")
    np.testing.assert_allclose(loaded.predict_scores(xi.to_numpy()), lgb_multi.predict(xi))
    loaded = registry.load_verified(settings, "xgb-diabetes", "1")
    np.testing.assert_allclose(
        loaded.predict_scores(xd.to_numpy()), xgb_reg.inplace_predict(xd.to_numpy()), rtol=1e-6
    )


@pytest.mark.formats
def test_to_onnx_converts_multiclass_and_regression_versions_carrying_their_task(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    import lightgbm as lgb
    from sklearn.ensemble import RandomForestClassifier

    iris, iris_frame = _bundled(home, "load_iris", ["setosa", "versicolor", "virginica"])
    diabetes, diabetes_frame = _bundled(home, "load_diabetes")
    xi, xd = iris_frame[_features(iris_frame)], diabetes_frame[_features(diabetes_frame)]
    forest = RandomForestClassifier(10, random_state=0).fit(xi.to_numpy(), iris_frame["target"])
    booster = lgb.LGBMRegressor(n_estimators=10, verbose=-1)
    booster.fit(xd.to_numpy(), diabetes_frame["target"])
    for name, data, model in (("iris", iris, forest), ("diabetes", diabetes, booster)):
        path = _saved(home, f"{name}.joblib", model)
        registry.register(settings, name, dataset=data, model_path=path, label="target")

    result = cli_in_process(
        "register", "iris", "--to-onnx", "--dataset", str(iris), "--label", "target"
    )
    assert result.returncode == 0, result.stderr
    with pytest.raises(CheckFailed) as raised:
        registry.register_onnx(settings, "diabetes", dataset=diabetes, label="target", tolerance=0)
    assert re.fullmatch(
        r"the ONNX conversion of diabetes/1 \(onnxmltools==[\d.]+\) scores up to \S+ away from "
        r"it \(\S+ of its largest prediction\) on load_diabetes.csv \(tolerance 0\); not "
        r"registered",
        str(raised.value),
    )
    derived = registry.register_onnx(settings, "diabetes", dataset=diabetes, label="target")
    assert derived.version == "2"

    iris_onnx = registry.show(settings, "iris/2")
    assert iris_onnx.tags["mlpipe.flavor"] == "onnx"
    assert iris_onnx.task.task == "multiclass"
    assert iris_onnx.task.classes == ("setosa", "versicolor", "virginica")
    assert derived.task.task == "regression" and "mlpipe.threshold" not in derived.tags
    assert float(derived.tags["mlpipe.metric.max_rel_score_delta"]) <= 1e-4
    for name, x in (("iris", xi), ("diabetes", xd)):
        parent = registry.load_verified(settings, name, "1").predict_scores(x.to_numpy())
        onnx = registry.load_verified(settings, name, "2").predict_scores(x.to_numpy())
        assert onnx.shape == parent.shape
        recorded = float(registry.show(settings, f"{name}/2").metrics["max_abs_score_delta"])
        assert np.max(np.abs(onnx - parent)) <= recorded + 1e-12
        assert recorded <= (1e-4 if name == "iris" else 1e-4 * np.max(np.abs(parent)))


def test_a_threshold_for_a_model_that_is_not_binary_is_refused(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    from sklearn.linear_model import LogisticRegression

    data, frame = _bundled(home, "load_iris")
    model = LogisticRegression(max_iter=1000).fit(frame[_features(frame)], frame["target"])
    _saved(home, "iris.joblib", model)
    args = ("register", "iris", "--model", "iris.joblib", "--dataset", str(data))
    result = cli_in_process(*args, "--label", "target", "--threshold", "0.7")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --threshold applies to binary classifiers; this model is multiclass (3 classes)"
    )
    result = cli_in_process(*args, "--label", "target", "--task", "binary")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --task binary does not match the model: this LogisticRegression has 3 "
        "classes, so it is multiclass (3 classes)"
    )
    result = cli_in_process(*args, "--label", "target", "--task", "ranking")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --task is one of binary, multiclass, regression, got 'ranking'"
    )
    assert registry.list_models(settings) == []


@pytest.mark.formats
def test_an_ambiguous_onnx_graph_needs_task_and_unsupported_models_are_named(
    home: Path, settings: Any
) -> None:
    import skl2onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import Ridge
    from sklearn.svm import LinearSVC

    data, frame = _bundled(home, "load_diabetes")
    x = frame[_features(frame)]
    ridge = Ridge().fit(x.to_numpy(), frame["target"])
    proto = skl2onnx.convert_sklearn(
        ridge, initial_types=[("input", FloatTensorType([None, x.shape[1]]))]
    )
    (home / "ridge.onnx").write_bytes(proto.SerializeToString())
    with pytest.raises(InvalidInput) as raised:
        registry.register(
            settings, "d", dataset=data, model_path=home / "ridge.onnx", label="target"
        )
    assert str(raised.value).endswith("say which with --task binary or --task regression")
    with pytest.raises(InvalidInput, match="--threshold applies to binary classifiers; this "):
        registry.register(
            settings, "d", dataset=data, model_path=home / "ridge.onnx", label="target",
            task="regression", threshold=0.5,
        )  # fmt: skip
    with pytest.raises(InvalidInput) as raised:  # a regression served as P(class 1): no
        registry.register(
            settings, "d", dataset=data, model_path=home / "ridge.onnx", label="target",
            task="binary",
        )  # fmt: skip
    assert str(raised.value).startswith(
        "the onnx model's output does not fit a binary model: on the dataset's first rows a "
        "probability outside [0, 1] (values ["
    )
    svc = _saved(home, "svc.joblib", LinearSVC().fit(x, frame["target"] > 140))
    with pytest.raises(InvalidInput) as raised:
        registry.register(settings, "d", dataset=data, model_path=svc, label="target")
    assert str(raised.value) == (
        f"{svc} holds a LinearSVC, not a model mlpipe registers: it registers binary and "
        "multiclass classifiers (predict_proba) and regressors (predict) of "
        "scikit-learn/LightGBM/XGBoost, LightGBM and XGBoost Boosters, ONNX graphs, torch modules"
    )
    assert registry.list_models(settings) == []

    info = registry.register(
        settings, "d", dataset=data, model_path=home / "ridge.onnx", label="target",
        task="regression",
    )  # fmt: skip
    assert json.loads(json.dumps(info.tags))["mlpipe.task"] == "regression"
    out = registry.load_verified(settings, "d", "1").predict_scores(x.to_numpy())
    np.testing.assert_allclose(out, ridge.predict(x.to_numpy()), rtol=1e-5)
