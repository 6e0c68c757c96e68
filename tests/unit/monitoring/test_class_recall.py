"""A class whose recall collapses is a quality alarm that names it (issue 28, item 5).

Register records each class's recall (``mlpipe.class_recall``); the quality check of
a labelled window judges each class against it. Before, a multiclass model that
stopped predicting one of three classes kept accuracy and macro F1 inside their
margins often enough to pass, and nothing said which class had gone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring import _class_recall as cr
from mlpipe.monitoring import _quality
from mlpipe.monitoring._quality import RegisteredMetrics, alarm_text, quality, task_quality
from mlpipe.registry import VersionInfo
from mlpipe.tasks import TaskSpec

CLASSES = ("setosa", "versicolor", "virginica")
SPEC = TaskSpec("multiclass", CLASSES)


def _window(
    rows: int, collapsed: int | None, seed: int = 0, shares: tuple[float, ...] = (0.45, 0.45, 0.1)
) -> tuple[pd.DataFrame, np.ndarray]:
    """A multiclass window: the model is right 90 % of the time, except on class
    ``collapsed`` (if any), which it always calls class 1."""
    rng = np.random.default_rng(seed)
    y = rng.choice(3, rows, p=list(shares))
    predicted = np.where(rng.uniform(0, 1, rows) < 0.9, y, (y + 1) % 3)
    if collapsed is not None:
        predicted = np.where(y == collapsed, 1, predicted)
    probs = np.full((rows, 3), 0.1)
    probs[np.arange(rows), predicted] = 0.8
    frame = pd.DataFrame(
        {
            "score": probs.max(axis=1),
            "label": predicted,
            "probabilities": list(probs),
            "outcome": np.nan,
            "outcome_label": [CLASSES[i] for i in y],
            "ts": pd.date_range("2026-01-01", periods=rows, freq="s"),
        }
    )
    return frame, rng.integers(0, rows // 4, rows)


def _baseline(support: int = 0, **recall: float) -> RegisteredMetrics:
    figures = {"accuracy": 0.9, "macro_f1": 0.9, "log_loss": 0.4}
    per_class = {
        cr.key(c): cr.RegisteredRecall(
            value=recall.get(c, 0.9), support=support if c in recall else 0
        )
        for c in CLASSES
    }
    return RegisteredMetrics(metrics=figures, class_recall=per_class)


def test_a_collapsed_class_alarms_by_its_name() -> None:
    rows, clusters = _window(3000, collapsed=2)
    figures, _ = task_quality(rows, clusters, _baseline(), 100, SPEC)
    assert "recall[virginica]" in figures.alarms, figures.metrics
    assert "recall[setosa]" not in figures.alarms
    assert figures.status == "quality"
    assert figures.class_recall["virginica"] == 0.0
    assert alarm_text("recall[virginica]") == (
        "quality: recall of class 'virginica' below the registered value"
    )


def test_a_clean_window_passes_every_class() -> None:
    rows, clusters = _window(3000, collapsed=None, seed=1)
    figures, _ = task_quality(rows, clusters, _baseline(), 100, SPEC)
    assert figures.alarms == [], figures.metrics
    assert figures.status == "ok"
    assert set(figures.class_recall) == set(CLASSES)
    assert all(0.85 < v < 0.95 for v in figures.class_recall.values())


def test_a_baseline_measured_on_training_data_alarms_only_on_a_collapse() -> None:
    even = (0.35, 0.35, 0.3)
    rows, clusters = _window(3000, collapsed=None, seed=2, shares=even)
    optimistic = _baseline(virginica=1.0)  # 0.9 in the window: 0.1 down
    keys = frozenset(cr.key(c) for c in CLASSES)
    tight, _ = task_quality(rows, clusters, optimistic, 100, SPEC)
    wide, _ = task_quality(rows, clusters, optimistic, 100, SPEC, widen=keys)
    assert "recall[virginica]" in tight.alarms  # a holdout figure: margin 0.05
    assert wide.alarms == []  # training data: margin 0.25
    assert "recall[virginica]" in wide.baseline_note
    collapsed, clusters = _window(3000, collapsed=2, seed=2, shares=even)
    figures, _ = task_quality(collapsed, clusters, optimistic, 100, SPEC, widen=keys)
    assert "recall[virginica]" in figures.alarms
    assert "recall[setosa]" not in figures.alarms


def test_a_class_with_too_few_entities_is_not_judged() -> None:
    rows, clusters = _window(600, collapsed=2, seed=3, shares=(0.49, 0.5, 0.01))
    figures, _ = task_quality(rows, clusters, _baseline(), 100, SPEC)
    virginica = next(m for m in figures.metric_dicts() if m["metric"] == "recall[virginica]")
    assert virginica["worse"] is None and virginica["support"] < 10
    assert "recall[virginica]" not in figures.alarms


def test_a_binary_model_that_flags_everyone_alarms_on_its_negative_class() -> None:
    rng = np.random.default_rng(4)
    y = (rng.uniform(0, 1, 2000) < 0.3).astype(float)
    score = 0.7 + 0.2 * y + rng.uniform(-0.05, 0.05, 2000)  # all above 0.5
    rows = pd.DataFrame(
        {
            "score": score,
            "label": (score >= 0.5).astype(int),
            "outcome": y,
            "ts": pd.date_range("2026-01-01", periods=2000, freq="s"),
        }
    )
    registered = RegisteredMetrics(
        metrics={"auc": 0.9, "recall": 0.9, "precision": 0.8, "log_loss": 0.4},
        class_recall={cr.key("legit"): cr.RegisteredRecall(value=0.95)},
    )
    figures = quality(rows, rng.integers(0, 500, 2000), registered, 100)
    assert "recall[legit]" in figures.alarms
    assert figures.class_recall == {"legit": 0.0}
    assert "recall" not in figures.alarms  # class 1's recall is fine


def _version(tags: dict[str, str]) -> VersionInfo:
    return VersionInfo("m", "1", [], tags, None, "", 0)


def test_the_registered_recall_follows_the_class_order() -> None:
    multiclass = _version(
        {
            "mlpipe.task": "multiclass",
            "mlpipe.classes": '["setosa", "versicolor", "virginica"]',
            "mlpipe.class_recall": '{"setosa": 1.0, "virginica": 0.8}',
        }
    )
    got = cr.registered(multiclass)
    assert list(got) == ["recall[setosa]", "recall[versicolor]", "recall[virginica]"]
    assert got["recall[setosa]"].value == 1.0 and math.isnan(got["recall[versicolor]"].value)
    binary = _version(
        {
            "mlpipe.task": "binary",
            "mlpipe.classes": '["legit", "fraud"]',
            "mlpipe.class_recall": '{"legit": 0.97, "fraud": 0.7}',
        }
    )
    # fraud's is `recall`; no class_support tag: its support is unknown
    assert cr.registered(binary) == {"recall[legit]": cr.RegisteredRecall(value=0.97, support=0)}
    assert cr.registered(_version({"mlpipe.task": "regression"})) == {}
    assert cr.registered(_version({})) == {}  # registered before it was measured


@pytest.mark.parametrize(
    ("source", "widened"),
    [("holdout", set()), ("training", {"auc", "recall[0]"}), (None, {"auc", "recall[0]"})],
)
def test_only_a_baseline_measured_on_training_data_is_widened(
    monkeypatch: pytest.MonkeyPatch, source: str | None, widened: set[str]
) -> None:
    tags = {"mlpipe.metrics_measured": "auc", "mlpipe.class_recall": '{"0": 0.9, "1": 0.8}'}
    if source is not None:
        tags["mlpipe.metrics_source"] = source
    monkeypatch.setattr(_quality.registry, "show", lambda *_: _version(tags))
    settings: Any = None
    assert _quality.measured_metrics(settings, "m", "1") == widened


def test_a_baseline_measured_on_few_rows_counts_its_own_error() -> None:
    """A clean window at the model's true recall (0.9) judged against a holdout figure that
    came out high (1.0): on 5,000 holdout rows that is a real drop; on 80 it is noise."""
    rows, clusters = _window(3000, collapsed=None, seed=2, shares=(0.35, 0.35, 0.3))
    judged = {}
    for holdout_rows in (80, 5000):
        baseline = _baseline(holdout_rows, virginica=0.98)
        figures, _ = task_quality(rows, clusters, baseline, 100, SPEC)
        judged[holdout_rows] = "recall[virginica]" in figures.alarms
        virginica = next(m for m in figures.metric_dicts() if m["metric"] == "recall[virginica]")
        assert type(virginica["baseline"]) is float and virginica["baseline"] == 0.98
    assert judged == {80: False, 5000: True}


def test_the_registered_recall_carries_its_rows() -> None:
    info = _version(
        {
            "mlpipe.task": "binary",
            "mlpipe.classes": "[0, 1]",
            "mlpipe.class_recall": '{"0": 0.97, "1": 0.7}',
            "mlpipe.class_support": '{"0": 812, "1": 188}',
        }
    )
    (figure,) = cr.registered(info).values()
    assert figure == cr.RegisteredRecall(value=0.97, support=812)
