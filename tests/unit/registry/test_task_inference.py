"""Task types (issue 21 item 4): each flavor tells binary, multiclass and regression models
apart, and scores them as serving will (no registry here; registration is in
tests/integration/test_register_tasks.py).

scikit-learn's bundled sets: iris (3 classes), wine (3 classes, named here with
strings), diabetes (regression), breast cancer (binary).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlpipe.errors import InvalidInput
from mlpipe.registry import convert_to_onnx
from mlpipe.registry._candidate import read_candidate
from mlpipe.registry._flavors import for_candidate
from mlpipe.registry._model_flavor import plain_classes
from mlpipe.registry._onnx_convert import max_abs_delta
from mlpipe.tasks import TaskSpec


def _iris() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    return x, y


def _diabetes() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    return x, y


def _task_and_output(model: Any, x: np.ndarray) -> tuple[TaskSpec, np.ndarray]:
    flavor = for_candidate(model)
    task = flavor.task_of(model, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LightGBM's feature-name warning on arrays
        return task, task.check_output(flavor.scorer(model, task)(x), len(x))


def test_sklearn_classifiers_and_regressors_are_told_apart_and_scored_like_themselves() -> None:
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    xi, yi = _iris()
    iris = LogisticRegression(max_iter=1000).fit(xi, yi)
    task, out = _task_and_output(iris, xi)
    assert (task.task, task.classes) == ("multiclass", (0, 1, 2))
    np.testing.assert_array_equal(out, iris.predict_proba(xi))

    wine = load_wine()
    names = np.asarray(wine.target_names)[wine.target]
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    pipe.fit(wine.data, names)
    task, out = _task_and_output(pipe, wine.data)
    assert task.classes == ("class_0", "class_1", "class_2")
    assert task.to_tags() == {
        "mlpipe.task": "multiclass",
        "mlpipe.classes": '["class_0", "class_1", "class_2"]',
    }
    np.testing.assert_array_equal(out, pipe.predict_proba(wine.data))

    xd, yd = _diabetes()
    ridge = make_pipeline(StandardScaler(), Ridge()).fit(xd, yd)
    task, out = _task_and_output(ridge, xd)
    assert task.task == "regression" and task.classes == ()
    np.testing.assert_array_equal(out, ridge.predict(xd))


def test_a_binary_classifier_keeps_its_classes_and_p_of_the_second() -> None:
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # scaled, lbfgs converges in tens of steps, not ~2,700
    labels = np.where(y == 1, "benign", "malignant")
    model = LogisticRegression(max_iter=5000).fit(x, labels)
    task, out = _task_and_output(model, x)
    assert (task.task, task.classes) == ("binary", ("benign", "malignant"))
    np.testing.assert_array_equal(out, model.predict_proba(x)[:, 1])


def test_lightgbm_sklearn_api_and_booster_files_multiclass_and_regression(tmp_path: Path) -> None:
    import lightgbm as lgb

    xi, yi = _iris()
    xd, yd = _diabetes()
    clf = lgb.LGBMClassifier(n_estimators=8, verbose=-1).fit(xi, yi)
    reg = lgb.LGBMRegressor(n_estimators=8, verbose=-1).fit(xd, yd)
    params = {"objective": "multiclass", "num_class": 3, "verbose": -1}
    lgb.train(params, lgb.Dataset(xi, yi), 8).save_model(tmp_path / "multi.txt")
    lgb.train({"objective": "huber", "verbose": -1}, lgb.Dataset(xd, yd), 8).save_model(
        tmp_path / "reg.txt"
    )
    task, out = _task_and_output(clf, xi)
    assert (for_candidate(clf).name, task.task, task.classes) == (
        "sklearn",
        "multiclass",
        (0, 1, 2),
    )
    np.testing.assert_allclose(out, clf.predict_proba(xi), rtol=1e-12)
    task, out = _task_and_output(reg, xd)
    assert task.task == "regression"
    np.testing.assert_allclose(out, reg.predict(xd), rtol=1e-12)

    booster = read_candidate(tmp_path / "multi.txt")
    task, out = _task_and_output(booster, xi)
    assert (for_candidate(booster).name, task.task, task.classes) == (
        "lightgbm",
        "multiclass",
        (0, 1, 2),
    )
    np.testing.assert_allclose(out, booster.predict(xi), rtol=1e-12)
    booster = read_candidate(tmp_path / "reg.txt")
    task, out = _task_and_output(booster, xd)
    assert task.task == "regression"
    np.testing.assert_allclose(out, booster.predict(xd), rtol=1e-12)


@pytest.mark.formats
def test_xgboost_sklearn_api_and_booster_files_multiclass_and_regression(tmp_path: Path) -> None:
    import xgboost as xgb

    xi, yi = _iris()
    xd, yd = _diabetes()
    clf = xgb.XGBClassifier(n_estimators=8, n_jobs=1).fit(xi, yi)
    reg = xgb.XGBRegressor(n_estimators=8, n_jobs=1).fit(xd, yd)
    clf.save_model(tmp_path / "multi.json")
    reg.save_model(tmp_path / "reg.ubj")
    for model in (clf, read_candidate(tmp_path / "multi.json")):
        task, out = _task_and_output(model, xi)
        assert (for_candidate(model).name, task.task, task.classes) == (
            "xgboost",
            "multiclass",
            (0, 1, 2),
        )
        np.testing.assert_allclose(out, clf.predict_proba(xi), rtol=1e-6)
    for model in (reg, read_candidate(tmp_path / "reg.ubj")):
        task, out = _task_and_output(model, xd)
        assert task.task == "regression"
        np.testing.assert_allclose(out, reg.predict(xd), rtol=1e-6)


@pytest.mark.formats
def test_xgboost_softmax_objective_is_served_as_probabilities_of_its_classes() -> None:
    import xgboost as xgb

    xi, yi = _iris()
    params = {"objective": "multi:softmax", "num_class": 3, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(xi, yi), 8)
    task, out = _task_and_output(booster, xi)
    assert task.task == "multiclass"
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    np.testing.assert_array_equal(out.argmax(axis=1), booster.predict(xgb.DMatrix(xi)))


def test_a_declared_task_that_contradicts_the_model_is_one_line() -> None:
    from sklearn.linear_model import LinearRegression, LogisticRegression

    xi, yi = _iris()
    iris = LogisticRegression(max_iter=1000).fit(xi, yi)
    flavor = for_candidate(iris)
    assert flavor.task_of(iris, "multiclass").task == "multiclass"
    with pytest.raises(InvalidInput) as raised:
        flavor.task_of(iris, "binary")  # never serve a multiclass model as binary
    assert str(raised.value) == (
        "--task binary does not match the model: this LogisticRegression has 3 classes, so it "
        "is multiclass (3 classes)"
    )
    regressor = LinearRegression().fit(*_diabetes())
    with pytest.raises(
        InvalidInput,
        match="--task multiclass does not match the model: this "
        "LinearRegression is a regressor, so it is regression$",
    ):
        for_candidate(regressor).task_of(regressor, "multiclass")


def _onnx_regressor() -> Any:
    import skl2onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import Ridge

    xd, yd = _diabetes()
    model = Ridge().fit(xd, yd)
    types = [("input", FloatTensorType([None, xd.shape[1]]))]
    return model, skl2onnx.convert_sklearn(model, initial_types=types)


@pytest.mark.formats
def test_an_onnx_graph_with_one_value_per_row_needs_task_binary_or_regression() -> None:
    model, proto = _onnx_regressor()
    flavor = for_candidate(proto)
    with pytest.raises(InvalidInput) as raised:
        flavor.task_of(proto, None)
    assert str(raised.value) == (
        "this ONNX graph's output 'variable' is one number per row: P(class 1) of a binary "
        "classifier or a regression's prediction; say which with --task binary or --task "
        "regression"
    )
    with pytest.raises(InvalidInput, match="--task multiclass does not match the model"):
        flavor.task_of(proto, "multiclass")
    task = flavor.task_of(proto, "regression")
    xd, _ = _diabetes()
    out = task.check_output(flavor.scorer(proto, task)(xd), len(xd))
    np.testing.assert_allclose(out, model.predict(xd), rtol=1e-5)


@pytest.mark.formats
@pytest.mark.parametrize("zipmap", [False, True])
def test_an_onnx_classifier_graph_names_its_classes(zipmap: bool) -> None:
    import skl2onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    xi, yi = _iris()
    names = np.asarray(["setosa", "versicolor", "virginica"])[yi]
    source = LogisticRegression(max_iter=1000).fit(xi, names)
    proto = skl2onnx.convert_sklearn(
        source, initial_types=[("input", FloatTensorType([None, 4]))], options={"zipmap": zipmap}
    )
    task, out = _task_and_output(proto, xi)
    assert (task.task, task.classes) == ("multiclass", ("setosa", "versicolor", "virginica"))
    np.testing.assert_allclose(out, source.predict_proba(xi), atol=1e-6)


@pytest.mark.formats
@pytest.mark.parametrize("kind", ["sklearn", "lgbm-sklearn", "lightgbm", "xgboost"])
@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_converted_multiclass_and_regression_graphs_agree_with_their_source(
    kind: str, task: str
) -> None:
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    x, y = _iris() if task == "multiclass" else _diabetes()
    multi = task == "multiclass"
    lgb_params = {"objective": "multiclass", "num_class": 3} if multi else {"objective": "l2"}
    source = {
        "sklearn": lambda: (RandomForestClassifier if multi else RandomForestRegressor)(
            10, random_state=0
        ).fit(x, y),
        "lgbm-sklearn": lambda: (lgb.LGBMClassifier if multi else lgb.LGBMRegressor)(
            n_estimators=8, verbose=-1
        ).fit(x, y),
        "lightgbm": lambda: lgb.train({**lgb_params, "verbose": -1}, lgb.Dataset(x, y), 8),
        "xgboost": lambda: (xgb.XGBClassifier if multi else xgb.XGBRegressor)(
            n_estimators=8, n_jobs=1
        ).fit(x, y),
    }[kind]()
    flavor = for_candidate(source)
    spec = flavor.task_of(source, None)
    assert spec.task == task
    proto, _ = convert_to_onnx(flavor.name, source, x.shape[1])
    assert for_candidate(proto).task_of(proto, task).classes == spec.classes
    delta = max_abs_delta(flavor.scorer(source, spec), proto, x, spec)
    scale = 1.0 if multi else float(np.max(np.abs(y)))
    assert delta / scale < 1e-5


def test_class_labels_become_plain_json_values() -> None:
    labels = plain_classes(np.asarray([0.0, 1.0, 2.0]))
    assert labels == (0, 1, 2) and all(type(v) is int for v in labels)
    assert plain_classes(np.asarray(["a", "b"], dtype=object)) == ("a", "b")
    assert plain_classes([np.int64(3), True, 1.5]) == (3, 1, "1.5")
