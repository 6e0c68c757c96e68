"""Binary, multiclass and regression models through the whole loop (issue 21 item 4).

scikit-learn's bundled sets, as a team would bring them: breast_cancer (binary),
iris (multiclass, integer classes), wine (multiclass, string classes) and
diabetes (regression). Each model gets two versions, deployed as champion and
a 50 % canary, and one real server answers all four over ``/predict`` and the
Open Inference Protocol (tritonclient). Every answer is checked against the
answering version's own ``predict_proba`` / ``predict``; the prediction log is
synced to the warehouse, the ground truth loaded with ``outcomes load`` (class
names for wine, numeric targets for diabetes), and ``monitor drift`` and
``canary analyze`` run on it through the CLI with the task's metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli, run_in_process
from tests.e2e.conftest import Server, predlog_rows


@dataclass(frozen=True)
class Case:
    name: str
    task: str
    loader: str
    string_classes: bool = False


CASES = [
    Case("cancer", "binary", "load_breast_cancer"),
    Case("iris", "multiclass", "load_iris"),
    Case("wine", "multiclass", "load_wine", string_classes=True),
    Case("diabetes", "regression", "load_diabetes"),
]
MAX_INPUTS = 10


def _frame(case: Case) -> pd.DataFrame:
    """The set as one frame: its feature columns (names made identifier-like) and ``target``."""
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, case.loader)(as_frame=True)
    frame = bunch.frame.rename(
        columns=lambda c: c.replace(" ", "_").replace("(", "").replace(")", "")
    )
    if case.string_classes:
        names = np.asarray(bunch.target_names)
        frame["target"] = names[frame["target"].to_numpy()]
    # At most MAX_INPUTS inputs (breast_cancer has 30): drift calibrates every column, and
    # ten say as much about the loop as thirty, at a third of the test's time.
    frame = frame[[*frame.columns.drop("target")[:MAX_INPUTS], "target"]]
    return frame.sample(frac=1.0, random_state=0).reset_index(drop=True)


def _model(case: Case, variant: int) -> Any:
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if case.task == "regression":
        return make_pipeline(StandardScaler(), Ridge(alpha=1.0 + 4.0 * variant))
    return make_pipeline(
        StandardScaler(), LogisticRegression(C=1.0 / (1 + 9 * variant), max_iter=2000)
    )


def _outputs(model: Any, case: Case, rows: pd.DataFrame) -> np.ndarray:
    if case.task == "regression":
        return np.asarray(model.predict(rows))
    proba = np.asarray(model.predict_proba(rows))
    return proba[:, 1] if case.task == "binary" else proba


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """Four models, two versions each, champion + 50 % canary, one server answering them all."""
    import joblib

    from mlpipe import deployments, registry
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("tasks-home")
    settings = load_settings(home=home)
    env = {
        "MLPIPE_HOME": str(home),
        "MLPIPE_MONITOR__CANARY_MIN_REQUESTS": "20",
        "MLPIPE_MONITOR__CANARY_MIN_LABELS": "15",
    }
    models: dict[tuple[str, str], Any] = {}
    traffic: dict[str, pd.DataFrame] = {}
    for case in CASES:
        frame = _frame(case)
        cut = int(len(frame) * 0.6)
        train, traffic[case.name] = frame.iloc[:cut], frame.iloc[cut:].reset_index(drop=True)
        data = home / f"{case.name}.csv"
        train.to_csv(data, index=False)
        inputs = [c for c in frame.columns if c != "target"]
        versions = []
        for variant in (0, 1):
            model = _model(case, variant).fit(train[inputs], train["target"])
            path = home / f"{case.name}-{variant}.joblib"
            joblib.dump(model, path)
            info = registry.register(
                settings, case.name, dataset=data, model_path=path, label="target"
            )
            models[(case.name, info.version)] = model
            versions.append(info.version)
        deployments.deploy(settings, case.name, versions[0])
        deployments.deploy(settings, case.name, versions[1], canary=50)
    with Server(home, settings).running() as server:
        yield SimpleNamespace(
            home=home, settings=settings, env=env, server=server, models=models, traffic=traffic
        )


def _inputs(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c != "target"]


@pytest.fixture(scope="module")
def answered(loop: SimpleNamespace) -> dict[str, list[dict[str, Any]]]:
    """Every traffic row of every model sent to ``/predict`` once: name -> response bodies."""
    out: dict[str, list[dict[str, Any]]] = {}
    for case in CASES:
        frame = loop.traffic[case.name]
        bodies = []
        for i, row in enumerate(frame[_inputs(frame)].to_dict("records")):
            body = {
                "model": case.name,
                "entity": {},
                "features": row,
                "request_id": f"{case.name}-{i}",
            }
            r = loop.server.post(body)
            assert r.status_code == 200, r.text
            bodies.append(r.json())
        out[case.name] = bodies
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_version_records_the_task_it_was_inferred_as(loop: Any, case: Case) -> None:
    from mlpipe import registry

    for (name, version), model in loop.models.items():
        if name != case.name:
            continue
        task = registry.show(loop.settings, f"{name}/{version}").task
        assert task.task == case.task
        if case.task != "regression":
            assert list(task.classes) == [_plain(c) for c in model.classes_]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_predict_answers_like_the_answering_version(
    loop: Any, answered: dict[str, list[dict[str, Any]]], case: Case
) -> None:
    frame = loop.traffic[case.name]
    bodies = answered[case.name]
    assert {b["arm"] for b in bodies} == {"champion", "canary"}
    for i, body in enumerate(bodies):
        model = loop.models[(case.name, body["version"])]
        want = _outputs(model, case, frame[_inputs(frame)].iloc[[i]])[0]
        if case.task == "binary":
            assert set(body) >= {"score", "label"} and "probabilities" not in body
            assert body["score"] == pytest.approx(float(want), abs=1e-9)
            assert body["label"] == int(want >= 0.5)
        elif case.task == "multiclass":
            assert "score" not in body and "prediction" not in body
            classes = [_plain(c) for c in model.classes_]
            probs = body["probabilities"]
            assert list(probs) == [str(c) for c in classes]
            assert list(probs.values()) == pytest.approx(want.tolist(), abs=1e-9)
            assert body["label"] == classes[int(np.argmax(want))]
        else:
            assert set(body) & {"score", "label", "probabilities"} == set()
            assert body["prediction"] == pytest.approx(float(want), rel=1e-9)


TASK_OUTPUTS = {
    "binary": ["score", "label"],
    "multiclass": ["probabilities", "label"],
    "regression": ["prediction"],
}


@pytest.mark.nn  # tritonclient
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_oip_outputs_follow_the_task(loop: Any, case: Case) -> None:
    import tritonclient.http as triton

    frame = loop.traffic[case.name].iloc[:8]
    wanted = TASK_OUTPUTS[case.task]
    client = triton.InferenceServerClient(url=loop.server.url.removeprefix("http://"))
    try:
        meta = client.get_model_metadata(case.name)
        tensors = []
        for name in _inputs(frame):
            tensor = triton.InferInput(name, [len(frame)], "FP64")
            tensor.set_data_from_numpy(frame[name].to_numpy(dtype=np.float64))
            tensors.append(tensor)
        asked = [triton.InferRequestedOutput(n) for n in [*wanted, "version"]]
        result = client.infer(case.name, tensors, outputs=asked, request_id=f"oip-{case.name}")
    finally:
        client.close()
    assert [o["name"] for o in meta["outputs"]][: len(wanted)] == wanted
    versions = [v.decode() for v in result.as_numpy("version").tolist()]
    for i, version in enumerate(versions):  # the canary answers some rows: each by its own
        model = loop.models[(case.name, version)]
        want = _outputs(model, case, frame[_inputs(frame)].iloc[[i]])[0]
        if case.task == "binary":
            assert result.as_numpy("score")[i] == pytest.approx(float(want), abs=1e-9)
            assert result.as_numpy("label")[i] == int(want >= 0.5)
        elif case.task == "multiclass":
            np.testing.assert_allclose(result.as_numpy("probabilities")[i], want, atol=1e-9)
            label = result.as_numpy("label")[i]
            label = label.decode() if isinstance(label, bytes) else int(label)
            assert label == _plain(model.classes_[int(np.argmax(want))])
        else:
            assert result.as_numpy("prediction")[i] == pytest.approx(float(want), rel=1e-9)


def test_the_log_keeps_what_each_task_predicts(
    loop: Any, answered: dict[str, list[dict[str, Any]]]
) -> None:
    logged = {r.request_id: r for r in predlog_rows(loop.settings)}
    for case in CASES:
        for i, body in enumerate(answered[case.name]):
            row = logged[f"{case.name}-{i}"]
            if case.task == "binary":
                assert (row.score, row.label, row.probabilities) == (
                    body["score"],
                    body["label"],
                    None,
                )
            elif case.task == "multiclass":
                probs = list(body["probabilities"].values())
                assert row.probabilities == pytest.approx(probs)
                assert row.label == int(np.argmax(probs))
                assert row.score == pytest.approx(max(probs))
            else:
                assert (row.score, row.label, row.probabilities) == (body["prediction"], None, None)


@pytest.fixture(scope="module")
def synced(loop: Any, answered: dict[str, list[dict[str, Any]]]) -> SimpleNamespace:
    """The log synced to the warehouse and every model's ground truth loaded, from one file:
    class names (wine), class numbers (cancer, iris) and numeric targets (diabetes)."""
    sync = run_cli("warehouse", "sync", env=loop.env)
    assert sync.returncode == 0, sync.stderr
    labels = pd.concat(
        pd.DataFrame(
            {
                "request_id": [f"{case.name}-{i}" for i in range(len(loop.traffic[case.name]))],
                "label": loop.traffic[case.name]["target"].astype(str),
            }
        )
        for case in CASES
    )
    path = loop.home / "outcomes.csv"
    labels.to_csv(path, index=False)
    return SimpleNamespace(sync=sync, load=run_cli("outcomes", "load", str(path), env=loop.env))


def test_outcomes_load_class_names_and_numeric_targets(loop: Any, synced: Any) -> None:
    from mlpipe import warehouse

    assert synced.load.returncode == 0, synced.load.stderr
    result = warehouse.query(
        loop.settings,
        "SELECT p.model, count(*) AS n, count(o.outcome_label) AS labelled "
        "FROM predictions p JOIN outcomes o USING (request_id, tenant) "
        "WHERE p.arm IN ('champion', 'canary') GROUP BY p.model ORDER BY p.model",
    )
    counts = {row[0]: (row[1], row[2]) for row in result.rows}
    for case in CASES:
        n = len(loop.traffic[case.name])
        assert counts[case.name] == (n, n)
    wine = warehouse.query(
        loop.settings, "SELECT DISTINCT outcome_label FROM outcomes WHERE request_id LIKE 'wine-%'"
    )
    assert {r[0] for r in wine.rows} == {"class_0", "class_1", "class_2"}


PREDICTION_METHOD = {
    "binary": "wasserstein",
    "multiclass": "jensenshannon",
    "regression": "wasserstein",
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_monitor_drift_finds_no_drift_in_held_out_traffic(
    loop: Any, synced: Any, case: Case, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The traffic is the set's held-out rows: the same distribution as the training reference."""
    code, out, err = _mlpipe(loop, monkeypatch, capsys, "monitor", "drift", case.name, "--json")
    assert code == 0, out + err
    verdict = json.loads(out)
    assert verdict["verdict"] == "ok"
    tested = [a for a in verdict["arms"] if a["verdict"] != "no_data"]
    assert tested, verdict  # at least the champion's 30+ rows were tested
    for arm in tested:
        predictions = [c for c in arm["columns"] if c["column"] == "prediction"]
        assert [c["method"] for c in predictions] == [PREDICTION_METHOD[case.task]]
        assert not arm["alarms"]


TASK_METRICS = {
    "binary": ["auc", "recall", "precision", "log_loss"],
    "multiclass": ["accuracy", "macro_f1", "log_loss"],
    "regression": ["mae", "rmse", "bias"],
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_canary_analyze_judges_by_the_task_metrics(
    loop: Any, synced: Any, case: Case, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The canary is the same model regularized harder: each classifier's canary is worse
    calibrated (its log loss fails, nothing else does); the regression's is as good."""
    code, out, _ = _mlpipe(loop, monkeypatch, capsys, "canary", "analyze", case.name, "--json")
    report = json.loads(out)
    checks = {c["name"]: c for c in report["checks"]}
    assert [n for n in checks if n in TASK_METRICS[case.task]] == TASK_METRICS[case.task]
    assert report["paired"] is True
    failed = sorted(n for n, c in checks.items() if c["passed"] is False)
    if case.task == "regression":
        assert (code, report["verdict"], failed) == (0, "pass", []), report
    else:
        assert (code, report["verdict"], failed) == (1, "fail", ["log_loss"]), report


def _mlpipe(
    loop: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any, *args: str
) -> tuple[int, str, str]:
    """``mlpipe ARGS`` in this process (no interpreter start per call), in the loop's home."""
    for key, value in loop.env.items():
        monkeypatch.setenv(key, value)
    return run_in_process(monkeypatch, capsys, *args)
