"""A quality check has a baseline or says it has none (issue 28, item 5).

Before the fix a version registered without ``--metric`` had NaN baselines; every
comparison was "not judged" and the check's status was ``ok``, so labels at chance
level passed. An alarm on log loss said "below the registered value" when the
window's log loss was above it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mlpipe.monitoring._quality import RegisteredMetrics, alarm_text, quality, task_quality
from mlpipe.tasks import TaskSpec


def _labelled(rows: int = 2000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    score = rng.uniform(0, 1, rows)
    outcome = (rng.uniform(0, 1, rows) < score).astype(float)
    frame = pd.DataFrame(
        {
            "score": score,
            "label": (score >= 0.5).astype(int),
            "outcome": outcome,
            "ts": pd.date_range("2026-01-01", periods=rows, freq="s"),
        }
    )
    return frame, rng.integers(0, 400, rows)


def test_a_check_against_nan_baselines_says_no_baseline_not_ok() -> None:
    rows, clusters = _labelled()
    nothing = dict.fromkeys(("auc", "recall", "precision", "log_loss"), float("nan"))
    figures = quality(rows, clusters, RegisteredMetrics(metrics=nothing), 100)
    assert figures.status == "no baseline"
    assert figures.alarms == []
    assert figures.note.startswith("no baseline: the version has no registered metrics")


def test_a_check_with_some_baselines_names_the_ones_it_lacks() -> None:
    rows, clusters = _labelled()
    some = {"auc": 0.70, "recall": float("nan"), "precision": float("nan"), "log_loss": 0.7}
    figures = quality(rows, clusters, RegisteredMetrics(metrics=some), 100)
    assert figures.status == "ok", figures.metrics
    assert figures.note == "no baseline for recall, precision: not judged"


def test_a_regression_check_against_nan_baselines_says_no_baseline() -> None:
    rng = np.random.default_rng(0)
    rows = pd.DataFrame(
        {
            "score": rng.normal(0, 1, 500),
            "outcome": rng.normal(0, 1, 500),
            "ts": pd.date_range("2026-01-01", periods=500, freq="s"),
        }
    )
    nothing = dict.fromkeys(("mae", "rmse", "bias"), float("nan"))
    figures, _ = task_quality(
        rows, rng.integers(0, 100, 500), RegisteredMetrics(metrics=nothing), 100,
        TaskSpec("regression"),
    )  # fmt: skip
    assert figures.status == "no baseline"


def test_alarm_wording_follows_the_metric_direction() -> None:
    assert alarm_text("auc") == "quality: auc below the registered value"
    assert alarm_text("log_loss") == "quality: log_loss above the registered value"
    assert alarm_text("rmse") == "quality: rmse above the registered value"
    assert alarm_text("bias") == "quality: |bias| above the registered value"
