"""Label metrics with entity-clustered bootstrap CIs: the weights, the figures, their support
and the non-inferiority verdict (the canary analysis on top is in test_canary.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlpipe.monitoring._label_metrics import (
    BOOTSTRAP_DRAWS,
    MARGINS,
    METRICS,
    MIN_SUPPORT,
    TRAINING_MARGIN_FACTOR,
    TRAINING_RELATIVE_FACTOR,
    Scored,
    cluster_weights,
    compare,
    judge,
    paired,
    point_metrics,
    support,
    training_factor,
    unpaired,
    weighted_metrics,
)


def _scored(score: list[float], y: list[int], clusters: list[int], cut: float = 0.5) -> Scored:
    s = np.asarray(score, dtype=float)
    return Scored(s, (s >= cut).astype(int), np.asarray(y), np.asarray(clusters))


SMALL = _scored([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], [1, 2, 3, 4])


def test_point_metrics_of_four_rows() -> None:
    figures = point_metrics(SMALL)
    assert figures["auc"] == 0.75  # 0.35 beats 0.1, loses to 0.4; 0.8 beats both
    assert (figures["recall"], figures["precision"]) == (0.5, 1.0)
    expected = -(math.log(0.9) + math.log(0.6) + math.log(0.35) + math.log(0.8)) / 4
    assert figures["log_loss"] == pytest.approx(expected)


def test_a_tie_counts_one_half_and_an_undefined_metric_is_nan() -> None:
    tied = point_metrics(_scored([0.5, 0.5], [0, 1], [1, 2]))
    assert tied["auc"] == 0.5
    one_class = point_metrics(_scored([0.2, 0.3], [0, 0], [1, 2]))
    assert math.isnan(one_class["auc"]) and math.isnan(one_class["recall"])
    assert math.isnan(one_class["precision"])  # nothing flagged


def test_a_weight_of_two_is_the_row_twice() -> None:
    doubled = weighted_metrics(SMALL, np.array([[2.0, 1.0, 1.0, 1.0]]))
    repeated = point_metrics(_scored([0.1, 0.1, 0.4, 0.35, 0.8], [0, 0, 0, 1, 1], [1, 1, 2, 3, 4]))
    for metric in METRICS:
        assert doubled[metric][0] == pytest.approx(repeated[metric]), metric


def test_cluster_weights_draw_whole_entities() -> None:
    clusters = np.array([7, 7, 3, 9, 3, 7])
    w = cluster_weights(clusters, draws=50, seed=1)
    assert w.shape == (50, 6)
    assert (w[:, 0] == w[:, 1]).all() and (w[:, 1] == w[:, 5]).all() and (w[:, 2] == w[:, 4]).all()
    assert (w[:, [2, 0, 3]].sum(axis=1) == 3).all()  # 3 entities drawn per resample
    np.testing.assert_array_equal(w, cluster_weights(clusters, draws=50, seed=1))
    assert not np.array_equal(w, cluster_weights(clusters, draws=50, seed=2))
    assert cluster_weights(np.array([]), draws=4).shape == (4, 0)


def test_support_counts_distinct_entities_behind_each_metric() -> None:
    s = _scored([0.9, 0.9, 0.1, 0.7, 0.2], [1, 1, 1, 0, 0], [1, 1, 2, 3, 3])
    assert support(s) == {"auc": 1, "recall": 2, "precision": 2, "log_loss": 1}


def test_training_factor_is_wider_for_relative_margins() -> None:
    assert training_factor("log_loss") == training_factor("mae") == TRAINING_RELATIVE_FACTOR
    assert training_factor("auc") == training_factor("recall") == TRAINING_MARGIN_FACTOR


def _judge(deltas: list[float], *, n: int = MIN_SUPPORT, higher: bool = True, base: float = 0.8):
    return judge("m", base, base - 0.1, -0.1, np.array(deltas), 0.02, n, higher, 0.05)


def test_judge_calls_worse_only_when_the_whole_bound_is_beyond_the_margin() -> None:
    assert _judge([-0.05] * 20).worse is True  # the upper bound is -0.05 < -0.02
    assert _judge([-0.05] * 18 + [0.0] * 2).worse is False  # the upper bound reaches 0
    lower_is_better = _judge([0.05] * 20, higher=False)
    assert (lower_is_better.worse, lower_is_better.bound) == (True, pytest.approx(0.05))


def test_judge_leaves_a_thin_or_undefined_metric_unjudged() -> None:
    assert _judge([-0.05] * 20, n=MIN_SUPPORT - 1).worse is None
    assert _judge([-0.05] * 20, base=float("nan")).worse is None
    mostly_nan = _judge([float("nan")] * 11 + [-0.05] * 9)
    assert (mostly_nan.worse, math.isnan(mostly_nan.bound)) == (None, True)
    assert _judge([float("nan")] * 10 + [-0.05] * 10).worse is True  # half: still judged


def test_compare_widens_the_margins_of_a_training_baseline() -> None:
    zero = {m: np.zeros(BOOTSTRAP_DRAWS) for m in METRICS}
    baseline = {"auc": 0.9, "recall": 0.6, "precision": 0.5, "log_loss": 0.4}
    supports = dict.fromkeys(METRICS, 100)
    plain = {c.metric: c.margin for c in compare(zero, baseline, baseline, supports)}
    assert plain == pytest.approx({**MARGINS, "log_loss": 0.10 * 0.4})
    wide = compare(zero, baseline, baseline, supports, widen={"auc", "log_loss"})
    margins = {c.metric: c.margin for c in wide}
    assert margins["auc"] == pytest.approx(0.02 * 5)
    assert margins["log_loss"] == pytest.approx(0.10 * 0.4 * 20)
    assert margins["recall"] == MARGINS["recall"]
    assert [c.worse for c in wide] == [False] * 4


def _population(seed: int, blind: bool = False) -> tuple[Scored, Scored]:
    """400 rows of 100 customers; the model separates the classes unless ``blind``."""
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(100), 4)
    y = (rng.random(400) < 0.3).astype(int)
    good = np.clip(0.25 + 0.5 * y + rng.normal(0, 0.1, 400), 0, 1)
    noise = rng.random(400)
    return _scored(list(good), list(y), list(clusters)), _scored(
        list(noise if blind else good), list(y), list(clusters)
    )


def test_paired_one_model_on_both_sides_is_never_worse() -> None:
    baseline, same = _population(0)
    comparisons = paired(baseline, same)
    assert [c.metric for c in comparisons] == list(METRICS)
    assert all(c.worse is False and c.delta == 0 and c.bound == 0 for c in comparisons)


def test_paired_and_unpaired_catch_a_blind_model() -> None:
    baseline, blind = _population(0, blind=True)
    worse = {c.metric: c.worse for c in paired(baseline, blind)}
    assert worse["auc"] is True and worse["log_loss"] is True
    other_rows, _ = _population(1)
    _, blind_elsewhere = _population(2, blind=True)
    assert {c.metric: c.worse for c in unpaired(other_rows, blind_elsewhere)}["auc"] is True
