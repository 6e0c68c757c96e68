"""Label metrics of a multiclass or a regression model: the figures by hand, the margins each
is judged with, bias judged on its size, outcomes as each task reads them (the canary
analysis on top, and the agreement with scikit-learn, are in test_task_canary.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlpipe.monitoring import _task_metrics as tm
from mlpipe.monitoring._label_metrics import BOOTSTRAP_DRAWS
from mlpipe.tasks import TaskSpec

THREE = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.6, 0.3, 0.1]])


def test_multiclass_figures_by_hand_with_unnormalized_rows() -> None:
    doubled = THREE * np.array([[2.0], [1.0], [1.0], [4.0]])  # each row normalized first
    s = tm.Labelled(doubled, np.array([0, 1, 1, 2]), np.arange(4))
    got = tm.point_metrics("multiclass", s)
    assert got["accuracy"] == 0.5
    # class 0: predicted twice, right once (F1 2/3); class 1: 1 of 2 found (2/3); class 2:
    # predicted once and wrongly, its one row missed (0)
    assert got["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    expected = -(math.log(0.7) + math.log(0.8) + math.log(0.3) + math.log(0.1)) / 4
    assert got["log_loss"] == pytest.approx(expected)


def test_regression_figures_by_hand() -> None:
    s = tm.Labelled(np.array([3.0, 5.0, 1.0]), np.array([1.0, 5.0, 2.0]), np.arange(3))
    got = tm.point_metrics("regression", s)
    assert got == pytest.approx({"mae": 1.0, "rmse": math.sqrt(5 / 3), "bias": 1 / 3})


def test_binary_figures_are_not_computed_here() -> None:
    s = tm.Labelled(np.array([0.2]), np.array([1]), np.arange(1))
    with pytest.raises(ValueError, match="binary metrics are in _label_metrics, not for task"):
        tm.point_metrics("binary", s)


def test_support_is_every_labelled_entity_for_each_metric() -> None:
    s = tm.Labelled(THREE, np.array([0, 1, 1, 2]), np.array([5, 5, 6, 7]))
    assert tm.support("multiclass", s) == {"accuracy": 3, "macro_f1": 3, "log_loss": 3}
    assert set(tm.support("regression", s)) == {"mae", "rmse", "bias"}


def _constant(metrics: dict[str, float], baseline: dict[str, float]) -> dict[str, tuple]:
    return {
        k: (np.full(BOOTSTRAP_DRAWS, baseline[k]), np.full(BOOTSTRAP_DRAWS, v))
        for k, v in metrics.items()
    }


def test_regression_margins_are_shares_of_the_baseline_and_bias_is_judged_on_its_size() -> None:
    baseline = {"mae": 2.0, "rmse": 3.0, "bias": 0.1}
    candidate = {"mae": 2.1, "rmse": 3.5, "bias": -0.6}
    supports = dict.fromkeys(baseline, 50)
    out = {c.metric: c for c in tm.compare("regression", _constant(candidate, baseline),
                                           baseline, candidate, supports)}  # fmt: skip
    assert (out["mae"].margin, out["rmse"].margin) == (pytest.approx(0.2), pytest.approx(0.3))
    assert out["bias"].margin == pytest.approx(0.25 * 2.0)  # a share of the baseline's MAE
    assert out["bias"].delta == pytest.approx(0.5)  # |−0.6| − |0.1|
    assert {m: c.worse for m, c in out.items()} == {"mae": False, "rmse": True, "bias": False}
    mirrored = {**candidate, "bias": -0.1}  # the same size the other way: no worse
    again = tm.compare("regression", _constant(mirrored, baseline), baseline, mirrored, supports)
    assert next(c for c in again if c.metric == "bias").delta == pytest.approx(0.0)


def test_multiclass_margins_and_a_widened_training_baseline() -> None:
    baseline = {"accuracy": 0.9, "macro_f1": 0.85, "log_loss": 0.3}
    candidate = {"accuracy": 0.85, "macro_f1": 0.80, "log_loss": 0.36}
    draws = _constant(candidate, baseline)
    supports = dict.fromkeys(baseline, 50)
    plain = {c.metric: c for c in tm.compare("multiclass", draws, baseline, candidate, supports)}
    assert [plain[m].margin for m in ("accuracy", "macro_f1")] == [0.02, 0.05]
    assert plain["log_loss"].margin == pytest.approx(0.03)
    assert {m: c.worse for m, c in plain.items()} == {
        "accuracy": True,
        "macro_f1": False,  # 0.05 down: the bound sits on the margin, not beyond it
        "log_loss": True,
    }
    wide = tm.compare("multiclass", draws, baseline, candidate, supports, widen=set(baseline))
    assert [c.worse for c in wide] == [False, False, False]


def test_against_registered_figures() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(size=400)
    s = tm.Labelled(truth + rng.normal(0, 1, 400), truth, np.repeat(np.arange(100), 4))
    point, comparisons = tm.against_registered(
        "regression", s, {"mae": 0.8, "rmse": 1.0, "bias": 0.0}, alpha=0.05
    )
    assert point == tm.point_metrics("regression", s)
    assert [c.metric for c in comparisons] == ["mae", "rmse", "bias"]
    assert all(c.baseline == b for c, b in zip(comparisons, (0.8, 1.0, 0.0), strict=True))
    assert all(c.support == 100 for c in comparisons)
    worse_than_promised = tm.against_registered(
        "regression", s, {"mae": 0.4, "rmse": 0.5, "bias": 0.0}, alpha=0.05
    )[1]
    assert [c.worse for c in worse_than_promised][:2] == [True, True]


def test_regression_outcomes_count_labels_that_are_not_numbers() -> None:
    outcomes = tm.task_outcomes(
        TaskSpec("regression"),
        np.array([1.5, np.nan, np.nan, np.nan]),
        np.array(["1.5", "n/a", "", None], dtype=object),
    )
    assert outcomes.labelled.tolist() == [True, False, False, False]
    assert outcomes.unusable == 1  # "n/a" arrived; blank and None did not
    assert outcomes.note("regression") == "1 outcome label(s) are not numbers: left out"


def test_multiclass_outcomes_note_labels_that_name_no_class() -> None:
    spec = TaskSpec("multiclass", ("low", "mid", "high"))
    outcomes = tm.task_outcomes(spec, np.full(3, np.nan), np.array(["high", "huge", "tiny"]))
    assert outcomes.y[0] == 2.0 and outcomes.unusable == 2
    assert outcomes.note("multiclass") == (
        "2 outcome label(s) name no class of the version: left out"
    )
    all_known = tm.task_outcomes(spec, np.array([np.nan]), np.array(["mid"]))
    assert (all_known.y.tolist(), all_known.note("multiclass")) == ([1.0], "")


def test_stacked_probabilities() -> None:
    assert tm.stacked([[0.1, 0.9, 0.0], (0.5, 0.25, 0.25)]).tolist() == [
        [0.1, 0.9, 0.0],
        [0.5, 0.25, 0.25],
    ]
    assert tm.stacked([]).shape == (0, 0)
