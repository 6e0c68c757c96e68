"""The quantization guard: which of a derived version's figures fell beyond their tolerance,
as the text the refusal and ``mlpipe.accepted_degradation`` carry (evaluate() itself is
exercised with torch modules in test_torch_quantize.py)."""

from __future__ import annotations

from mlpipe.registry._quantize_figures import (
    AUC_TOLERANCE,
    MAE_TOLERANCE,
    RECALL_TOLERANCE,
    degradation,
)


def _binary(**after: float) -> dict[str, float]:
    parent = {"recall_class_0": 0.9, "recall_class_1": 0.8, "auc": 0.95}
    figures = {**parent, **after}
    return {**figures, **{"parent_" + k: v for k, v in parent.items()}}


def test_figures_within_their_tolerance_are_no_degradation() -> None:
    figures = _binary(
        recall_class_0=0.9 - RECALL_TOLERANCE + 0.001,
        recall_class_1=0.85,  # a rise is never a degradation
        auc=0.95 - AUC_TOLERANCE + 0.001,
    )
    assert degradation(figures) == []


def test_a_class_s_recall_and_the_auc_beyond_tolerance_are_named_in_order() -> None:
    figures = _binary(recall_class_1=0.7, auc=0.9)
    assert degradation(figures) == [
        "AUC 0.950 -> 0.900 (tolerance 0.02)",
        "recall of class 1 0.800 -> 0.700 (tolerance 0.05)",
    ]


def test_a_class_without_rows_is_never_named() -> None:
    nan = float("nan")
    figures = {"recall_class_2": nan, "parent_recall_class_2": nan}
    assert degradation(figures) == []


def test_a_regression_s_mae_rising_beyond_its_relative_tolerance_is_named() -> None:
    within = {"mae": 2.0 * (1 + MAE_TOLERANCE) - 0.001, "parent_mae": 2.0}
    assert degradation(within) == []
    assert degradation({"mae": 2.5, "parent_mae": 2.0}) == ["MAE 2 -> 2.5 (+25.0%, tolerance 5%)"]


def test_a_regression_whose_parent_was_exact_says_from_0() -> None:
    assert degradation({"mae": 0.25, "parent_mae": 0.0}) == ["MAE 0 -> 0.25 (from 0, tolerance 5%)"]
