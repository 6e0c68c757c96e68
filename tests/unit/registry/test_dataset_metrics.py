"""The baseline register records agrees with the figures the quality check computes."""

import numpy as np
import pytest

from mlpipe.monitoring import _label_metrics as lm
from mlpipe.monitoring import _task_metrics as tm
from mlpipe.registry._dataset_metrics import _metrics
from mlpipe.tasks import TaskSpec

RNG = np.random.default_rng(7)


def test_binary_baseline_equals_the_quality_checks_figures() -> None:
    y = RNG.integers(0, 2, 500)
    scores = np.clip(y * 0.3 + RNG.random(500) * 0.7, 0.01, 0.99)
    task = TaskSpec("binary", (0, 1), 0.5)
    rows = np.arange(500)
    theirs = lm.point_metrics(lm.Scored(scores, scores >= 0.5, y, rows))
    ours = _metrics(task, scores, y)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_other_tasks_baseline_equals_the_quality_checks_figures(task: str) -> None:
    y = RNG.integers(0, 3, 400)
    if task == "multiclass":
        output = RNG.dirichlet([1, 1, 1], 400)
        output[np.arange(400), y] += 0.5
        output /= output.sum(axis=1, keepdims=True)
        spec = TaskSpec("multiclass", (0, 1, 2), None)
    else:
        output = y + RNG.normal(0, 0.5, 400)
        spec = TaskSpec("regression", (), None)
    theirs = tm.point_metrics(spec.task, tm.Labelled(output, y, np.arange(400)))
    ours = _metrics(spec, output, y)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, abs=1e-6), name


def test_a_metric_given_under_an_alias_wins_over_the_measured_one() -> None:
    from mlpipe.registry import tag_names
    from mlpipe.registry._baseline import with_measured

    measured = {
        **tag_names.metric_tags({"auc": 0.99, "log_loss": 0.05}),
        tag_names.METRICS_ON: "dataset train.parquet",
    }
    given = tag_names.metric_tags({"logloss": 0.31})  # a holdout figure, under the demo's name
    tags = with_measured(given, measured)
    assert tag_names.metrics(tags) == {"auc": 0.99, "logloss": 0.31}
    assert tags[tag_names.METRICS_MEASURED] == "auc"
