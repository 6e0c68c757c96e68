"""A multiclass and a regression model served by a real server (issue 21 item 4).

iris (LogisticRegression, classes 0-2) is registered with ``mlpipe register``
and diabetes (Ridge) with :func:`mlpipe.registry.register`, deployed (iris
with a second version as a 100 % shadow) and answered over ``/predict`` and
the Open Inference Protocol (tritonclient and JSON): each answer equals the
model's own ``predict_proba`` / ``predict``, a cache hit answers the same, and
the prediction log keeps the label, probabilities and score of each task. A
missing feature and a wrong type are 422s naming the field, and leave no log
row.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.e2e.conftest import Server, predlog_rows

pytestmark = pytest.mark.e2e

IRIS = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def _sets(home: Path) -> dict[str, pd.DataFrame]:
    from sklearn.datasets import load_diabetes, load_iris

    iris = load_iris(as_frame=True).frame
    iris.columns = [*IRIS, "target"]
    diabetes = load_diabetes(as_frame=True).frame
    for name, frame in (("iris", iris), ("diabetes", diabetes)):
        frame.to_csv(home / f"{name}.csv", index=False)
    return {"iris": iris, "diabetes": diabetes}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    import joblib
    from sklearn.linear_model import LogisticRegression, Ridge

    from mlpipe import deployments, registry
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("task-serving")
    settings = load_settings(home=home)
    frames = _sets(home)
    x_iris, x_diabetes = frames["iris"][IRIS], frames["diabetes"].drop(columns="target")
    models = {
        "iris": LogisticRegression(max_iter=1000).fit(x_iris, frames["iris"]["target"]),
        "diabetes": Ridge().fit(x_diabetes, frames["diabetes"]["target"]),
    }
    for name, model in models.items():
        joblib.dump(model, home / f"{name}.joblib")
    args = ["--model", str(home / "iris.joblib"), "--dataset", str(home / "iris.csv")]
    done = run_cli("register", "iris", *args, "--label", "target", env={"MLPIPE_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    registry.register(
        settings,
        "diabetes",
        dataset=home / "diabetes.csv",
        model_path=home / "diabetes.joblib",
        label="target",
    )
    for name in models:
        deployments.deploy(settings, name, "1")
    shadow = LogisticRegression(C=0.05, max_iter=1000).fit(x_iris, frames["iris"]["target"])
    joblib.dump(shadow, home / "iris2.joblib")
    info = registry.register(
        settings,
        "iris",
        dataset=home / "iris.csv",
        model_path=home / "iris2.joblib",
        label="target",
    )
    deployments.deploy(settings, "iris", info.version, shadow=100)
    with Server(home, settings).running() as server:
        yield SimpleNamespace(
            settings=settings, server=server, models=models, shadow=shadow, frames=frames
        )


def _inputs(served: Any, name: str, rows: list[int]) -> pd.DataFrame:
    return served.frames[name].drop(columns="target").iloc[rows]


def _post(served: Any, name: str, rows: list[int], tag: str) -> list[dict[str, Any]]:
    answers = []
    for i, features in zip(rows, _inputs(served, name, rows).to_dict("records"), strict=True):
        body = {"model": name, "entity": {}, "features": features, "request_id": f"{tag}-{i}"}
        r = served.server.post(body)
        assert r.status_code == 200, r.text
        answers.append(r.json())
    return answers


IRIS_ROWS = [0, 51, 77, 101, 133, 149]  # every class, and rows near the boundaries


def test_predict_answers_the_class_and_probabilities_of_the_model(served: Any) -> None:
    answers = _post(served, "iris", IRIS_ROWS, "iris")
    want = served.models["iris"].predict_proba(_inputs(served, "iris", IRIS_ROWS))
    for answer, proba in zip(answers, want, strict=True):
        assert list(answer) == [
            "request_id",
            "model",
            "version",
            "arm",
            "generation",
            "label",
            "probabilities",
            "features_missing",
            "cache_hit",
        ]
        assert answer["label"] == int(np.argmax(proba))
        assert list(answer["probabilities"]) == ["0", "1", "2"]
        assert list(answer["probabilities"].values()) == pytest.approx(proba.tolist(), abs=1e-12)
    assert {a["label"] for a in answers} == {0, 1, 2}


def test_predict_answers_the_value_of_a_regression(served: Any) -> None:
    rows = [0, 10, 200, 441]
    answers = _post(served, "diabetes", rows, "diabetes")
    want = served.models["diabetes"].predict(_inputs(served, "diabetes", rows))
    assert [a["prediction"] for a in answers] == pytest.approx(want.tolist(), rel=1e-12)
    assert all({"score", "label", "probabilities"}.isdisjoint(a) for a in answers)


def test_a_cache_hit_answers_the_same(served: Any) -> None:
    for name in ("iris", "diabetes"):
        first, again = (_post(served, name, [3], f"cache-{k}")[0] for k in "ab")
        assert (first["cache_hit"], again["cache_hit"]) == (False, True)
        drop = ("request_id", "cache_hit")
        assert {k: v for k, v in again.items() if k not in drop} == {
            k: v for k, v in first.items() if k not in drop
        }


def test_the_log_keeps_each_tasks_label_probabilities_and_score(served: Any) -> None:
    iris = _post(served, "iris", [5, 60], "log-iris")
    diabetes = _post(served, "diabetes", [7], "log-diabetes")
    shadow_want = served.shadow.predict_proba(_inputs(served, "iris", [5, 60]))
    rows: dict[tuple[str, str], Any] = {}
    for _ in range(50):  # the shadow rows are written off the response path
        rows = {(r.request_id, r.arm): r for r in predlog_rows(served.settings)}
        if ("log-iris-60", "shadow") in rows:
            break
        time.sleep(0.1)
    for answer, i, want in zip(iris, (5, 60), shadow_want, strict=True):
        row = rows[(f"log-iris-{i}", "champion")]
        probs = list(answer["probabilities"].values())
        assert row.probabilities == probs
        assert (row.label, row.score) == (answer["label"], max(probs))
        shadow = rows[(f"log-iris-{i}", "shadow")]
        assert shadow.version == "2" and shadow.probabilities == pytest.approx(want.tolist())
        assert shadow.label == int(np.argmax(want))
    row = rows[("log-diabetes-7", "champion")]
    assert (row.score, row.label, row.probabilities) == (diabetes[0]["prediction"], None, None)


@pytest.mark.nn  # tritonclient
def test_tritonclient_gets_the_probability_matrix_and_the_labels(served: Any) -> None:
    import tritonclient.http as triton

    frame = _inputs(served, "iris", IRIS_ROWS)
    client = triton.InferenceServerClient(url=served.server.url.removeprefix("http://"))
    try:
        meta = client.get_model_metadata("iris")
        tensors = []
        for name in IRIS:
            tensor = triton.InferInput(name, [len(frame)], "FP64")
            tensor.set_data_from_numpy(frame[name].to_numpy(dtype=np.float64))
            tensors.append(tensor)
        result = client.infer("iris", tensors, request_id="oip-iris")  # binary outputs
        probs, labels = result.as_numpy("probabilities"), result.as_numpy("label")
    finally:
        client.close()
    assert meta["outputs"][:2] == [
        {"name": "probabilities", "datatype": "FP64", "shape": [-1, 3]},
        {"name": "label", "datatype": "INT64", "shape": [-1]},
    ]
    assert meta["parameters"] == {"generation": 2, "task": "multiclass", "classes": [0, 1, 2]}
    want = served.models["iris"].predict_proba(frame)
    assert probs.shape == (len(frame), 3)
    np.testing.assert_allclose(probs, want, rtol=0, atol=1e-12)
    assert labels.dtype == np.int64 and labels.tolist() == want.argmax(axis=1).tolist()


def test_json_infer_of_a_regression_and_an_output_it_does_not_have(served: Any) -> None:
    url = f"{served.server.url}/v2/models/diabetes/infer"
    frame = _inputs(served, "diabetes", [1, 2, 3])
    matrix = {
        "inputs": [
            {
                "name": "features",
                "datatype": "FP64",
                "shape": [3, 10],
                "data": frame.values.tolist(),
            }
        ],
        "outputs": [{"name": "prediction"}],
    }
    r = httpx.post(url, json=matrix, timeout=30)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("prediction", "FP64", [3])
    assert out["data"] == pytest.approx(served.models["diabetes"].predict(frame).tolist())

    before = len(predlog_rows(served.settings))
    r = httpx.post(url, json={**matrix, "outputs": [{"name": "score"}]}, timeout=30)
    assert r.status_code == 400
    assert r.json() == {
        "error": "outputs: unknown output(s) ['score']; known: prediction, version, arm, "
        "request_id",
        "status": 400,
    }
    assert len(predlog_rows(served.settings)) == before


@pytest.mark.parametrize(
    ("change", "field", "error"),
    [
        (
            {"petal_width": None},
            "features.petal_width",
            "required request-time input; this model cannot take a missing value",
        ),
        ({"petal_width": "wide"}, "features.petal_width", "expected a number, got a string 'wide'"),
    ],
)
def test_a_bad_input_to_a_multiclass_model_is_422_naming_the_field(
    served: Any, change: dict[str, Any], field: str, error: str
) -> None:
    (features,) = _inputs(served, "iris", [0]).to_dict("records")
    features = {k: v for k, v in {**features, **change}.items() if v is not None}
    body = {"model": "iris", "entity": {}, "features": features, "request_id": f"bad-{field}"}
    r = served.server.post(body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert r.json()["error"] == f"{field}: {error}"
    assert not any(row.request_id == f"bad-{field}" for row in predlog_rows(served.settings))
