"""Each column judged, and an arm's verdict: drift needs significance *and* an effect; a
quality alarm outranks drift; a window too thin to test says so."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring._arm_window import ArmWindow
from mlpipe.monitoring._calibration import Plan
from mlpipe.monitoring._judgement import (
    ColumnDrift,
    distance_columns,
    judge_arm,
    missing_share_columns,
    positive_rate_column,
    positive_rate_test,
)
from mlpipe.monitoring._quality_section import QualitySection


def _distance(column: str, score: float, threshold: float = 0.05) -> ColumnDrift:
    return ColumnDrift.of_distance(
        column=column, kind="feature", method="wasserstein", score=score, threshold=threshold,
        effective_size=500.0,
    )  # fmt: skip


def test_a_significant_shift_below_the_minimum_effect_is_no_drift() -> None:
    small = _distance("hour", 0.08)
    assert small.significant and not small.drifted and small.status == "ok"
    large = _distance("amount", 0.6)
    assert large.drifted and large.status == "drift" and large.severity == "high"
    assert large.alarm() == "amount: high shift"


def test_an_untested_column_says_why() -> None:
    column = ColumnDrift.untested(
        column="age", kind="feature", method="wasserstein", effective_size=12.0, why="too few"
    )
    assert column.status == "insufficient" and column.threshold is None
    assert math.isnan(column.score) and column.detail == "too few" and not column.drifted


def test_distance_columns_judge_against_the_plan_and_skip_what_has_no_score() -> None:
    plan = Plan(
        alpha=0.01,
        entities=None,
        effective={"a": 400.0, "b": 10.0, "prediction": 400.0},
        thresholds={"a": 0.05, "prediction": 0.05},
        insufficient={"b": "effective sample 10 (< 30): not tested"},
    )
    tested = {
        "prediction": ("wasserstein", 0.3, 0.1, True),
        "b": ("wasserstein", 0.2, 0.1, True),
        "a": ("wasserstein", 0.01, 0.1, False),
        "c": ("jensenshannon", float("nan"), 0.1, False),
    }
    judged = distance_columns(tested, plan)
    assert [c.column for c in judged.columns] == ["a", "b", "prediction"]
    a, b, prediction = judged.columns
    assert a.status == "ok" and b.status == "insufficient" and b.detail.startswith("effective")
    assert prediction.kind == "prediction" and prediction.drifted
    assert [(s.column, s.reason) for s in judged.skipped] == [("c", "jensenshannon gave no score")]


def _window(labels: np.ndarray, entities: int, features: pd.DataFrame | None = None) -> ArmWindow:
    n = len(labels)
    rows = pd.DataFrame({"label": labels, "version": "1"})
    who = pd.Series([f"c{i % entities}" for i in range(n)])
    frame = features if features is not None else pd.DataFrame(index=range(n))
    return ArmWindow(rows=rows, features=frame, entities=who, total=n, sampled=False)


def test_the_positive_rate_doubling_is_prediction_drift() -> None:
    rng = np.random.default_rng(0)
    labels = (rng.random(4000) < 0.2).astype(int)
    column = positive_rate_column(_window(labels, 4000), 0.1, 5000, 0.001)
    assert column.column == "positive_rate" and column.kind == "prediction"
    assert column.drifted and column.detail.startswith("served 20.")
    same = positive_rate_column(_window(labels, 4000), float(labels.mean()), 5000, 0.001)
    assert not same.drifted and same.status == "ok"


def test_a_positive_rate_from_few_entities_is_not_tested() -> None:
    column = positive_rate_column(_window(np.ones(500, int), 5), 0.1, 5000, 0.001)
    assert column.status == "insufficient"
    assert column.detail == "5 distinct entities (< 30): not tested"


def test_a_column_going_missing_is_a_missing_share_alarm() -> None:
    values = np.where(np.arange(2000) % 2 == 0, np.nan, 1.0)
    window = _window(np.zeros(2000, int), 2000, pd.DataFrame({"amount": values}))
    reference = pd.DataFrame({"amount": np.where(np.arange(2000) % 20 == 0, np.nan, 1.0)})
    (column,) = missing_share_columns(window, reference, ["amount"], 0.001)
    assert column.kind == "missing" and column.drifted
    assert column.detail.startswith("missing 50.0% vs reference 5.0%")
    assert column.alarm().startswith("amount: high shift in missing share (missing 50.0%")


def test_the_rate_test_inflates_the_window_variance_by_the_design_effect() -> None:
    flagged = np.r_[np.ones(150), np.zeros(850)]
    plain = positive_rate_test(flagged, 1.0, 0.1, 10_000, 0.01)
    clustered = positive_rate_test(flagged, 10.0, 0.1, 10_000, 0.01)
    assert plain.significant and not clustered.significant
    assert abs(clustered.z) < abs(plain.z) and clustered.effect == pytest.approx(plain.effect)


def _quality(alarms: list[str]) -> QualitySection:
    return QualitySection(labelled_rows=500, rows=500, label_lag="", status="x", alarms=alarms)


def test_a_quality_alarm_outranks_drift_and_every_alarm_is_worded() -> None:
    columns = [_distance("amount", 0.6), _distance("hour", 0.01)]
    judged = judge_arm(columns, _quality(["auc"]), 0.5)
    assert judged.verdict == "quality" and judged.drift_share == 0.5
    assert judged.alarms == [
        "amount: high shift",
        "drift share 0.50 >= 0.5 (significant shifts)",
        "quality: auc below the registered value",
    ]
    assert judge_arm(columns, None, 0.9).verdict == "drift"
    assert judge_arm([_distance("hour", 0.01)], _quality([]), 0.5).verdict == "ok"


def test_an_arm_with_nothing_testable_is_insufficient_or_no_data() -> None:
    thin = ColumnDrift.untested(
        column="age", kind="feature", method="wasserstein", effective_size=3.0, why="few"
    )
    insufficient = judge_arm([thin], None, 0.5)
    assert insufficient.verdict == "insufficient" and insufficient.drift_share is None
    assert insufficient.notes == ["every column has too few distinct entities to test"]
    assert judge_arm([], None, 0.5).notes == ["no column could be tested"]
