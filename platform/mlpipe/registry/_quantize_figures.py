"""How a quantized version compares with its parent on an evaluation set, by task.

:func:`evaluate` gives the derived version's figures beside the parent's
(``parent_*``) and the deltas; :func:`degradation` names each figure that fell
beyond its tolerance (the quantization guard):

- binary: ``accuracy``, ``accuracy_delta``, ``max_abs_score_delta``,
  ``recall_class_<c>`` at the threshold and ``auc``; guard: a class's recall down
  by more than ``RECALL_TOLERANCE``, the AUC by more than ``AUC_TOLERANCE``;
- multiclass: ``accuracy``, ``accuracy_delta``, ``max_abs_probability_delta``,
  ``recall_class_<c>`` of the argmax and ``macro_f1``; guard: a class's recall;
- regression: ``mae``, ``rmse``, ``mae_delta``, ``max_abs_prediction_delta``;
  guard: the MAE up by more than ``MAE_TOLERANCE`` of the parent's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._torch_flavor import torch_scorer
from mlpipe.tasks import TaskSpec

RECALL_TOLERANCE = 0.05  # absolute drop in any class's recall
AUC_TOLERANCE = 0.02  # absolute drop in ROC AUC
MAE_TOLERANCE = 0.05  # relative rise of a regression's mean absolute error


def evaluate(
    parent: Any, derived: Any, x: np.ndarray, y: np.ndarray, task: TaskSpec
) -> dict[str, float]:
    """The derived model's figures beside the parent's on rows ``x`` with labels ``y``.

    Raises InvalidInput when a label names no class of a classifier, or a
    regression's label is not a number.
    """
    before = task.check_output(torch_scorer(parent, "cpu", task)(x), len(x))
    after = task.check_output(torch_scorer(derived, "cpu", task)(x), len(x))
    if task.task == "regression":
        return _regression(before, after, _numbers(y))
    truth = _class_indices(task, y)
    if task.task == "multiclass":
        return _multiclass(before, after, truth)
    return _binary(before, after, truth, task.threshold)


def _binary(
    before: np.ndarray, after: np.ndarray, truth: np.ndarray, threshold: float
) -> dict[str, float]:
    predicted = [(s >= threshold).astype(int) for s in (before, after)]
    figures = _accuracy(predicted[0], predicted[1], truth)
    figures["max_abs_score_delta"] = float(np.max(np.abs(after - before), initial=0.0))
    for prefix, scores, labels in (("", after, predicted[1]), ("parent_", before, predicted[0])):
        figures.update({prefix + k: v for k, v in _recalls(labels, truth, 2).items()})
        figures[prefix + "auc"] = _auc(scores, truth)
    return figures


def _multiclass(before: np.ndarray, after: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    classes = before.shape[1]
    predicted = [p.argmax(axis=1) for p in (before, after)]
    figures = _accuracy(predicted[0], predicted[1], truth)
    figures["max_abs_probability_delta"] = float(np.max(np.abs(after - before), initial=0.0))
    for prefix, labels in (("", predicted[1]), ("parent_", predicted[0])):
        figures.update({prefix + k: v for k, v in _recalls(labels, truth, classes).items()})
        figures[prefix + "macro_f1"] = _macro_f1(labels, truth, classes)
    return figures


def _regression(before: np.ndarray, after: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    figures = {}
    for prefix, values in (("", after), ("parent_", before)):
        error = values - truth
        figures[prefix + "mae"] = float(np.mean(np.abs(error)))
        figures[prefix + "rmse"] = float(np.sqrt(np.mean(error**2)))
    figures["mae_delta"] = figures["mae"] - figures["parent_mae"]
    figures["max_abs_prediction_delta"] = float(np.max(np.abs(after - before), initial=0.0))
    return figures


def _accuracy(before: np.ndarray, after: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    accuracy = float(np.mean(after == truth))
    return {"accuracy": accuracy, "accuracy_delta": accuracy - float(np.mean(before == truth))}


def _recalls(predicted: np.ndarray, truth: np.ndarray, classes: int) -> dict[str, float]:
    """Recall of each class (the share of its rows predicted as it; NaN if it has none)."""
    return {
        f"recall_class_{c}": float(np.mean(predicted[truth == c] == c))
        if (truth == c).any()
        else float("nan")
        for c in range(classes)
    }


def _macro_f1(predicted: np.ndarray, truth: np.ndarray, classes: int) -> float:
    """The mean F1 over the classes present in the truth or the predictions."""
    scores = []
    for c in range(classes):
        hits = int(np.sum((predicted == c) & (truth == c)))
        given, actual = int(np.sum(predicted == c)), int(np.sum(truth == c))
        if given or actual:
            scores.append(2 * hits / (given + actual))
    return float(np.mean(scores)) if scores else float("nan")


def _auc(scores: np.ndarray, truth: np.ndarray) -> float:
    """ROC AUC from ranks (ties count half); NaN with a single class."""
    from scipy.stats import rankdata

    positives = int(truth.sum())
    negatives = len(truth) - positives
    if not positives or not negatives:
        return float("nan")
    wins = rankdata(scores)[truth == 1].sum() - positives * (positives + 1) / 2
    return float(wins / (positives * negatives))


def _class_indices(task: TaskSpec, labels: np.ndarray) -> np.ndarray:
    """Each label's class index; InvalidInput naming a label that is no class."""
    values = labels.tolist()
    indices = task.class_indices(values)
    unknown = [v for v, c in zip(values, indices, strict=True) if c is None]
    if unknown:
        classes = ", ".join(str(c) for c in task.classes)
        raise InvalidInput(
            f"the label column holds {len(unknown)} value(s) that name no class of the model, "
            f"e.g. {unknown[0]!r} (its classes: {classes})"
        )
    return np.asarray(indices, dtype=int)


def _numbers(labels: np.ndarray) -> np.ndarray:
    try:
        values = np.asarray(labels, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput("a regression's label column must hold numbers") from exc
    if not np.isfinite(values).all():
        raise InvalidInput("a regression's label column must hold numbers, with none missing")
    return values


def degradation(figures: dict[str, float]) -> list[str]:
    """Each figure of the derived version that fell beyond its tolerance, as text."""
    drops = []
    for key in sorted(k for k in figures if k.startswith("recall_class_") or k == "auc"):
        before, after = figures["parent_" + key], figures[key]
        tolerance = AUC_TOLERANCE if key == "auc" else RECALL_TOLERANCE
        if before - after > tolerance:
            what = "AUC" if key == "auc" else f"recall of class {key.removeprefix('recall_class_')}"
            drops.append(f"{what} {before:.3f} -> {after:.3f} (tolerance {tolerance})")
    if "mae" in figures:
        before, after = figures["parent_mae"], figures["mae"]
        if after - before > MAE_TOLERANCE * before:
            rise = f"+{(after - before) / before:.1%}" if before else "from 0"
            drops.append(f"MAE {before:.4g} -> {after:.4g} ({rise}, tolerance {MAE_TOLERANCE:.0%})")
    return drops
