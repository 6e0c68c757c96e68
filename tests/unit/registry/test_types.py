"""What the registry hands back: a version read from its tags, a loaded version's inputs
and scores."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression

from mlpipe.registry import InputColumn, InputSchema, LoadedModel, VersionInfo, tag_names
from mlpipe.tasks import TaskSpec


def _info(tags: dict[str, str]) -> VersionInfo:
    return VersionInfo("fraud", "1", [], tags, None, "models:/m-1", 0)


def test_from_mlflow_reads_a_model_version_and_fills_what_mlflow_leaves_empty() -> None:
    mv = SimpleNamespace(
        name="fraud",
        version=3,
        aliases=None,
        tags=None,
        run_id=None,
        source="models:/m-3",
        creation_timestamp=None,
    )
    assert VersionInfo.from_mlflow(mv) == VersionInfo("fraud", "3", [], {}, None, "models:/m-3", 0)
    mv.aliases, mv.tags, mv.creation_timestamp = ["champion"], {"k": "v"}, 1700000000123
    info = VersionInfo.from_mlflow(mv)
    assert (info.aliases, info.tags, info.created_ms) == (["champion"], {"k": "v"}, 1700000000123)


def test_per_class_recall_and_support_come_from_their_tags() -> None:
    info = _info(
        {
            tag_names.CLASS_RECALL: json.dumps({"legit": 0.98, "fraud": 0.5}),
            tag_names.CLASS_SUPPORT: json.dumps({"legit": 90, "fraud": 10}),
        }
    )
    assert info.class_recall == {"legit": 0.98, "fraud": 0.5}
    assert info.class_support == {"legit": 90, "fraud": 10}
    assert all(isinstance(v, int) for v in info.class_support.values())
    assert (_info({}).class_recall, _info({}).class_support) == ({}, {})


@pytest.mark.parametrize(("source", "holdout"), [("holdout", True), ("training", False)])
def test_baseline_on_holdout_only_when_register_measured_on_one(source: str, holdout: bool) -> None:
    assert _info({tag_names.METRICS_SOURCE: source}).baseline_on_holdout is holdout
    assert _info({}).baseline_on_holdout is False  # predates --eval-dataset: training


def test_task_comes_from_the_tags_with_the_version_s_threshold() -> None:
    multiclass = TaskSpec("multiclass", ("a", "b", "c"))
    assert _info(multiclass.to_tags()).task == TaskSpec("multiclass", ("a", "b", "c"), 0.5)
    assert _info({tag_names.THRESHOLD: "0.3"}).task == TaskSpec("binary", (0, 1), 0.3)


def test_input_schema_is_none_for_a_version_registered_before_schemas() -> None:
    schema = InputSchema((InputColumn("amount", "number", "float64"),))
    assert _info({}).input_schema is None
    assert _info({tag_names.INPUT_SCHEMA: schema.to_json()}).input_schema == schema


FEATURES = ["amount", "country"]
NUMERIC = InputSchema(
    (InputColumn("amount", "number", "float64"), InputColumn("country", "integer", "int64"))
)
STRINGS = InputSchema(
    (
        InputColumn("amount", "number", "float64"),
        InputColumn("country", "string", "category", ("DE", "FR")),
    ),
    frame=True,
)


def _loaded(model: object, schema: InputSchema | None, task: TaskSpec) -> LoadedModel:
    return LoadedModel(
        name="fraud",
        version="1",
        features=FEATURES,
        feature_service=None,
        threshold=task.threshold,
        artifact_sha256="0" * 64,
        model=model,
        input_schema=schema,
        task=task,
    )


def test_a_numeric_version_takes_a_float_array_in_feature_order() -> None:
    loaded = _loaded(None, NUMERIC, TaskSpec())
    assert loaded.frame_inputs is None
    frame = pd.DataFrame({"country": [7, 8], "amount": [1.5, 2.5], "other": ["x", "y"]})
    inputs = loaded.inputs_from(frame)
    assert inputs.dtype == np.float64
    assert inputs.tolist() == [[1.5, 7.0], [2.5, 8.0]]


def test_a_frame_version_takes_a_dataframe_with_the_training_dtypes() -> None:
    loaded = _loaded(None, STRINGS, TaskSpec())
    assert loaded.frame_inputs == STRINGS
    frame = pd.DataFrame({"country": ["FR", "DE"], "amount": [1, 2]})
    inputs = loaded.inputs_from(frame)
    assert list(inputs.columns) == FEATURES
    assert str(inputs["amount"].dtype) == "float64"
    assert list(inputs["country"].cat.categories) == ["DE", "FR"]
    assert inputs["country"].tolist() == ["FR", "DE"]


def test_predict_scores_of_a_binary_classifier_is_p_class_1() -> None:
    x = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    model = LogisticRegression().fit(x, [0, 0, 1, 1])
    scores = _loaded(model, None, TaskSpec()).predict_scores(x)
    np.testing.assert_allclose(scores, model.predict_proba(x)[:, 1])


def test_predict_scores_of_a_regression_is_the_prediction_one_per_row() -> None:
    x = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]])
    model = LinearRegression().fit(x, [1.0, 3.0, 5.0])
    loaded = _loaded(model, None, TaskSpec("regression"))
    scores = loaded.predict_scores(np.array([[3.0, 1.0]]))
    assert scores.shape == (1,)
    assert scores[0] == pytest.approx(7.0)
