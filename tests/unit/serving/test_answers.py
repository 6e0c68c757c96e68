"""The answer body of a scored request: who answered, then its task's fields."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mlpipe.serving import PredictRequest
from mlpipe.serving._answers import response
from mlpipe.serving._item import Item
from mlpipe.tasks import Prediction, TaskSpec


def _item(task: TaskSpec, prediction: Prediction, **kw: Any) -> Item:
    req = PredictRequest(model="m", features={"amount": 1.0}, request_id="r1")
    served = SimpleNamespace(name="m", generation=4)
    plan = SimpleNamespace(version="2", task=task)
    return Item(req, 0, served, plan, "canary", "k", prediction=prediction, **kw)


WHO = {"request_id": "r1", "model": "m", "version": "2", "arm": "canary", "generation": 4}


def test_a_binary_answer_has_score_and_label_then_what_was_missing_and_the_cache() -> None:
    it = _item(TaskSpec(), Prediction(0.75, 1), missing=["avg"], cache_hit=True)
    answer = response(it)
    assert answer == {
        **WHO,
        "score": 0.75,
        "label": 1,
        "features_missing": ["avg"],
        "cache_hit": True,
    }
    assert list(answer) == [*WHO, "score", "label", "features_missing", "cache_hit"]


def test_a_multiclass_answer_names_the_class_and_each_probability() -> None:
    task = TaskSpec("multiclass", ("setosa", "versicolor", "virginica"))
    answer = response(_item(task, Prediction(0.7, 1, (0.1, 0.7, 0.2)), missing=[]))
    assert answer == {
        **WHO,
        "label": "versicolor",
        "probabilities": {"setosa": 0.1, "versicolor": 0.7, "virginica": 0.2},
        "features_missing": [],
        "cache_hit": False,
    }


def test_a_regression_answer_is_the_predicted_value() -> None:
    answer = response(_item(TaskSpec("regression"), Prediction(151.5, None), missing=[]))
    assert answer["prediction"] == 151.5 and "score" not in answer and "label" not in answer
