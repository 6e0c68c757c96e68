"""Each task through the batch pipeline, without a server: real scikit-learn models in
hand-built :class:`~mlpipe.registry.LoadedModel` s (iris, wine with named classes,
diabetes), answered and logged by their task, cached, shadow-scored."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np
import pytest

from mlpipe.config import load_settings
from mlpipe.errors import InvalidInput
from mlpipe.predlog import DECODER, ENCODER, PredictionRecord
from mlpipe.registry import LoadedModel
from mlpipe.serving import PredictRequest, PredictResponse
from mlpipe.tasks import TaskSpec
from tests.unit.serving.test_pipeline import FakeControl, ListSink, fake_runtime


@cache
def _sets() -> dict[str, tuple[Any, np.ndarray, TaskSpec]]:
    """name -> (fitted model, the set's rows, its task), fitted once per session."""
    from sklearn.datasets import load_diabetes, load_iris, load_wine
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    iris, wine, diabetes = load_iris(), load_wine(), load_diabetes()
    wine_y = np.asarray(wine.target_names)[wine.target]
    lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    return {
        "iris": (lr.fit(iris.data, iris.target), iris.data, TaskSpec("multiclass", (0, 1, 2))),
        "wine": (
            make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(
                wine.data, wine_y
            ),
            wine.data,
            TaskSpec("multiclass", tuple(str(c) for c in wine.target_names)),
        ),
        "diabetes": (
            Ridge().fit(diabetes.data, diabetes.target),
            diabetes.data,
            TaskSpec("regression"),
        ),
    }


def _features(name: str) -> list[str]:
    return [f"x{j}" for j in range(_sets()[name][1].shape[1])]


class TaskControl(FakeControl):
    """Serves real models: version "1" of each set, "2" its task with a class too many."""

    def load(self, _s: Any, name: str, version: str) -> LoadedModel:
        model, _, task = _sets()[name]
        if version == "2":  # a version whose scorer gives fewer columns than it has classes
            task = TaskSpec("multiclass", (*task.classes, "extra"))
        return LoadedModel(
            name=name,
            version=version,
            features=_features(name),
            feature_service=None,
            threshold=0.5,
            artifact_sha256="0" * 64,
            model=model,
            task=task,
        )


@pytest.fixture
def env(tmp_path: Path) -> Any:
    control = TaskControl()
    for name in _sets():
        control.set(name, 1, "1")
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    yield built
    built.pipeline.close()


def _reqs(name: str, rows: range) -> list[PredictRequest]:
    data = _sets()[name][1]
    return [
        PredictRequest(
            model=name,
            entity={},
            features=dict(zip(_features(name), data[i].tolist(), strict=True)),
            request_id=f"{name}-{i}",
        )
        for i in rows
    ]


@pytest.mark.parametrize("name", ["iris", "wine"])
def test_multiclass_answers_the_class_and_its_probabilities(env: Any, name: str) -> None:
    model, data, task = _sets()[name]
    rows = range(0, len(data), 7)
    out = env.pipeline.predict_batch(_reqs(name, rows))
    want = model.predict_proba(data[list(rows)])
    for res, proba, cls in zip(out, want, model.predict(data[list(rows)]), strict=True):
        assert "score" not in res and "prediction" not in res
        assert res["label"] == (cls.item() if hasattr(cls, "item") else cls)
        assert isinstance(res["label"], int if name == "iris" else str)
        assert list(res["probabilities"]) == [str(c) for c in task.classes]
        assert list(res["probabilities"].values()) == pytest.approx(proba.tolist(), abs=1e-12)
        PredictResponse.model_validate(res)
    logged = {r.request_id: r for r in env.sink.rows}
    for i, proba in zip(rows, want, strict=True):
        row = logged[f"{name}-{i}"]
        assert row.label == int(np.argmax(proba))
        assert row.probabilities == pytest.approx(proba.tolist(), abs=1e-12)
        assert row.score == pytest.approx(proba.max(), abs=1e-12)


def test_regression_answers_the_predicted_value(env: Any) -> None:
    model, data, _ = _sets()["diabetes"]
    out = env.pipeline.predict_batch(_reqs("diabetes", range(20)))
    want = model.predict(data[:20])
    assert [r["prediction"] for r in out] == pytest.approx(want.tolist(), rel=1e-12)
    assert all({"score", "label", "probabilities"}.isdisjoint(r) for r in out)
    assert [(r.score, r.label, r.probabilities) for r in env.sink.rows] == [
        (p, None, None) for p in (r["prediction"] for r in out)
    ]


def test_tasks_mixed_in_one_batch_each_get_their_own_fields(env: Any) -> None:
    reqs = [*_reqs("iris", range(3)), *_reqs("diabetes", range(3)), *_reqs("wine", range(3))]
    out = env.pipeline.predict_batch(reqs)
    assert [sorted(set(r) & {"label", "probabilities", "prediction"}) for r in out] == [
        ["label", "probabilities"]
    ] * 3 + [["prediction"]] * 3 + [["label", "probabilities"]] * 3


def test_a_cache_hit_gives_the_same_answer(env: Any) -> None:
    first = env.pipeline.predict_batch(_reqs("wine", range(5)))
    again = env.pipeline.predict_batch(_reqs("wine", range(5)))
    strip = ("cache_hit",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in again] == [
        {k: v for k, v in r.items() if k not in strip} for r in first
    ]
    assert all(r["cache_hit"] for r in again) and not any(r["cache_hit"] for r in first)
    rows = env.sink.rows
    assert [r.probabilities for r in rows[5:]] == [r.probabilities for r in rows[:5]]
    assert all(r.prediction_cache_hit for r in rows[5:])


def test_shadow_rows_keep_the_shadow_versions_probabilities(env: Any) -> None:
    env.control.set("iris", 2, "1", shadow="1b", sample=100)
    env.loader.refresh()
    env.pipeline.predict_batch(_reqs("iris", range(4)))
    env.pipeline.close()  # waits for the shadow thread
    shadow = [r for r in env.sink.rows if r.arm == "shadow"]
    assert len(shadow) == 4 and all(len(r.probabilities or ()) == 3 for r in shadow)


def test_an_output_that_does_not_fit_the_task_is_a_500_and_is_not_logged(env: Any) -> None:
    env.control.set("iris", 2, "2")  # 4 classes, a model of 3 columns
    env.loader.refresh()
    out = env.pipeline.predict_batch(_reqs("iris", range(2)))
    assert [r["status"] for r in out] == [500, 500]
    assert out[0]["error"] == (
        "the model returned expected 1×4 class probabilities, got shape [1, 3] for this input"
    )
    assert env.sink.rows == []


def test_a_missing_or_mistyped_input_of_a_multiclass_model_names_the_field(env: Any) -> None:
    (good,) = _reqs("iris", range(1))
    missing = good.model_copy(update={"features": {"x0": 1.0, "x1": 2.0, "x2": 3.0}})
    refused = r"^features\.x3: required request-time input; this model cannot take a missing value$"
    with pytest.raises(InvalidInput, match=refused):
        env.pipeline.check(missing)
    typed = good.model_copy(update={"features": {**good.features, "x2": "wide"}})
    with pytest.raises(InvalidInput, match=r"^features\.x2: .*'wide'"):
        env.pipeline.check(typed)


def test_a_binary_version_labels_at_its_own_threshold(tmp_path: Path) -> None:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2))
    model = LogisticRegression().fit(x, (x[:, 0] > 0).astype(int))

    class Strict(FakeControl):
        def load(self, _s: Any, name: str, version: str) -> LoadedModel:
            return LoadedModel(name, version, ["a", "b"], None, 0.9, "0" * 64, model)

    control = Strict()
    control.set("fraud", 1, "1")
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    reqs = [
        PredictRequest(model="fraud", entity={}, features={"a": float(a), "b": 0.0})
        for a in (-2.0, 0.3, 3.0)
    ]
    out = built.pipeline.predict_batch(reqs)
    built.pipeline.close()
    assert [list(r)[5:7] for r in out] == [["score", "label"]] * 3  # the binary answer as ever
    assert [r["label"] for r in out] == [int(r["score"] >= 0.9) for r in out]
    assert [r.label for r in built.sink.rows] == [r["label"] for r in out]
    assert all(r.probabilities is None for r in built.sink.rows)


def test_the_response_schema_lists_each_tasks_fields_as_optional_never_null() -> None:
    schema = PredictResponse.model_json_schema()
    props = schema["properties"]
    assert {"score", "label", "probabilities", "prediction"} <= set(props)
    assert not {"score", "label", "probabilities", "prediction"} & set(schema["required"])
    assert "null" not in str(props)
    assert props["probabilities"]["additionalProperties"] == {"type": "number"}


def test_log_rows_read_back_for_every_task_and_from_before_tasks() -> None:
    base = SimpleNamespace(
        request_id="r",
        ts=1.0,
        tenant="t",
        model="m",
        version="1",
        arm="champion",
        generation=1,
        entity_key="k",
        entity={},
        features={"x": 1.0},
        latency_ms=0.5,
    )
    rows = [
        PredictionRecord(**vars(base), score=0.7, label=1),
        PredictionRecord(**vars(base), score=0.6, label=2, probabilities=[0.1, 0.3, 0.6]),
        PredictionRecord(**vars(base), score=151.5, label=None),
    ]
    assert [DECODER.decode(ENCODER.encode(r)) for r in rows] == rows
    old = msgspec.json.decode(ENCODER.encode(rows[0]))
    del old["probabilities"]  # a row written before tasks existed
    assert DECODER.decode(msgspec.json.encode(old)) == rows[0]
