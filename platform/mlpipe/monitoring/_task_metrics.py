"""Label metrics of a multiclass or a regression model, with entity-clustered bootstrap bounds.

The binary metrics (AUC, recall, precision, log loss) live in
:mod:`._label_metrics`; this module gives the other tasks the same shape, so a
canary analysis, a shadow analysis and a quality report judge them alike:

- multiclass: accuracy, macro F1 and log loss, from each row's class
  probabilities and the outcome's class index (``TaskSpec.class_index``);
- regression: MAE, RMSE and bias (mean prediction − outcome; judged on its size,
  ``|bias|``, since a bias either way is as bad).

Every metric is computed for a whole matrix of cluster-bootstrap weights at once
(:func:`._label_metrics.cluster_weights`); with weight one per row the figures
are scikit-learn's (tests check it). Margins: how much worse a candidate may be
before it counts as worse: accuracy 0.02 and macro F1 0.05 (absolute), log
loss 10 % of the baseline's, MAE and RMSE 10 % of the baseline's, |bias| 25 %
of the baseline's MAE (bias has no scale of its own: 0 is its best value; a
retrained model with a bias of a tenth of its error's sd, 0.13 MAE, is as good,
and for normal errors it takes a bias of about 0.6 MAE to cost 10 % of MAE).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlpipe.monitoring import _label_metrics as lm
from mlpipe.tasks import Task, TaskSpec

METRICS: dict[Task, tuple[str, ...]] = {
    "binary": lm.METRICS,
    "multiclass": ("accuracy", "macro_f1", "log_loss"),
    "regression": ("mae", "rmse", "bias"),
}
HIGHER_IS_BETTER = {
    **lm.HIGHER_IS_BETTER,
    "accuracy": True,
    "macro_f1": True,
    "mae": False,
    "rmse": False,
    "bias": False,  # judged on |bias|
}
# (margin, relative to): None = absolute; else the baseline metric it is a share of.
MARGINS: dict[str, tuple[float, str | None]] = {
    "accuracy": (0.02, None),
    "macro_f1": (0.05, None),
    "log_loss": (0.10, "log_loss"),
    "mae": (0.10, "mae"),
    "rmse": (0.10, "rmse"),
    "bias": (0.25, "mae"),
}
_EPS = 1e-7


@dataclass(frozen=True)
class Labelled:
    """One model on rows whose outcome arrived: ``output`` is ``[n, K]`` class probabilities
    (multiclass) or ``[n]`` predictions (regression); ``y`` the outcome's class index or value;
    ``clusters`` the entity of each row."""

    output: np.ndarray
    y: np.ndarray
    clusters: np.ndarray


def _share(w: np.ndarray, values: np.ndarray) -> np.ndarray:
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(total > 0, (w @ values) / np.where(total > 0, total, 1), np.nan))


def _macro_f1(pred: np.ndarray, y: np.ndarray, k: int, w: np.ndarray) -> np.ndarray:
    """Mean F1 over the classes each resample predicts or holds (scikit-learn's macro F1)."""
    scores = []
    for c in range(k):
        tp = w @ ((pred == c) & (y == c)).astype(float)
        wrong = w @ ((pred == c) != (y == c)).astype(float)  # false positives + negatives
        den = 2 * tp + wrong
        with np.errstate(invalid="ignore", divide="ignore"):
            scores.append(np.where(den > 0, 2 * tp / np.where(den > 0, den, 1), np.nan))
    stacked = np.vstack(scores)
    present = ~np.isnan(stacked)
    counts = present.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(counts > 0, np.nansum(stacked, axis=0) / counts, np.nan))


def weighted_metrics(task: Task, s: Labelled, w: np.ndarray) -> dict[str, np.ndarray]:
    """The task's metrics (:data:`METRICS`) per row of weights ``w`` (shape (draws, rows))."""
    if task == "regression":
        error = s.output.astype(float) - s.y.astype(float)
        return {
            "mae": _share(w, np.abs(error)),
            "rmse": np.sqrt(_share(w, error**2)),
            "bias": _share(w, error),
        }
    if task != "multiclass":
        raise ValueError(f"binary metrics are in _label_metrics, not for task {task!r}")
    probs = s.output / np.clip(s.output.sum(axis=1, keepdims=True), _EPS, None)
    y = s.y.astype(int)
    pred = probs.argmax(axis=1)
    truth = np.clip(probs[np.arange(len(y)), y], _EPS, 1 - _EPS) if len(y) else np.zeros(0)
    return {
        "accuracy": _share(w, (pred == y).astype(float)),
        "macro_f1": _macro_f1(pred, y, probs.shape[1], w),
        "log_loss": _share(w, -np.log(truth)),
    }


def point_metrics(task: Task, s: Labelled) -> dict[str, float]:
    """The metrics on the rows as they are (weight one each)."""
    ones = np.ones((1, len(s.y)))
    return {k: float(v[0]) for k, v in weighted_metrics(task, s, ones).items()}


def support(task: Task, s: Labelled) -> dict[str, int]:
    """Distinct entities each metric rests on (every labelled entity, for these tasks)."""
    entities = len(np.unique(s.clusters))
    return dict.fromkeys(METRICS[task], entities)


def _judged(metric: str, values: np.ndarray | float) -> np.ndarray:
    """What is compared: the metric itself, or its size for bias."""
    return np.abs(values) if metric == "bias" else np.asarray(values)


def compare(
    task: Task,
    draws: dict[str, tuple[np.ndarray, np.ndarray]],
    baseline: dict[str, float],
    candidate: dict[str, float],
    supports: dict[str, int],
    alpha: float = 0.05,
    widen: Collection[str] = (),
) -> list[lm.MetricComparison]:
    """Non-inferiority per metric, as :func:`._label_metrics.compare` does for binary
    (``widen`` too).

    ``draws`` holds, per bootstrap draw, ``(baseline, candidate)`` metric values
    (``baseline`` a constant for a comparison with registered figures). A
    metric is worse when the whole one-sided ``1 - alpha`` bound of its
    difference is beyond the margin on the worse side.
    """
    out = []
    for metric in METRICS[task]:
        base, cand = baseline[metric], candidate[metric]
        b_draws, c_draws = draws[metric]
        deltas = _judged(metric, c_draws) - _judged(metric, b_draws)
        share, of = MARGINS[metric]
        margin = share * (abs(baseline[of]) if of is not None else 1.0)
        margin *= lm.training_factor(metric) if metric in widen else 1.0
        delta = float(_judged(metric, cand) - _judged(metric, base))
        out.append(
            lm.judge(
                metric,
                base,
                cand,
                delta,
                deltas,
                margin,
                supports[metric],
                HIGHER_IS_BETTER[metric],
                alpha,
            )
        )
    return out


def paired(
    task: Task, baseline: Labelled, candidate: Labelled, seed: int = 0
) -> list[lm.MetricComparison]:
    """Two models on the same rows: one set of cluster weights for both."""
    w = lm.cluster_weights(baseline.clusters, lm.BOOTSTRAP_DRAWS, seed)
    b, c = weighted_metrics(task, baseline, w), weighted_metrics(task, candidate, w)
    draws = {k: (b[k], c[k]) for k in METRICS[task]}
    return compare(
        task,
        draws,
        point_metrics(task, baseline),
        point_metrics(task, candidate),
        _least(task, baseline, candidate),
    )


def unpaired(
    task: Task, baseline: Labelled, candidate: Labelled, seed: int = 0, alpha: float = 0.01
) -> list[lm.MetricComparison]:
    """Two models on different rows (each side resampled on its own, stricter ``alpha``)."""
    wb = lm.cluster_weights(baseline.clusters, lm.BOOTSTRAP_DRAWS, seed)
    wc = lm.cluster_weights(candidate.clusters, lm.BOOTSTRAP_DRAWS, seed + 1)
    b, c = weighted_metrics(task, baseline, wb), weighted_metrics(task, candidate, wc)
    draws = {k: (b[k], c[k]) for k in METRICS[task]}
    base, cand = point_metrics(task, baseline), point_metrics(task, candidate)
    return compare(task, draws, base, cand, _least(task, baseline, candidate), alpha)


def against_registered(
    task: Task, s: Labelled, registered: dict[str, float], alpha: float, widen: Collection[str] = ()
) -> tuple[dict[str, float], list[lm.MetricComparison]]:
    """The rows' metrics and their comparison with the version's registered figures."""
    w = lm.cluster_weights(s.clusters, lm.BOOTSTRAP_DRAWS)
    served = weighted_metrics(task, s, w)
    draws = {k: (np.full(len(w), registered[k]), served[k]) for k in METRICS[task]}
    point = point_metrics(task, s)
    return point, compare(task, draws, registered, point, support(task, s), alpha, widen)


def _least(task: Task, baseline: Labelled, candidate: Labelled) -> dict[str, int]:
    b, c = support(task, baseline), support(task, candidate)
    return {k: min(b[k], c[k]) for k in METRICS[task]}


@dataclass(frozen=True)
class Outcomes:
    """Each row's ground truth for the task: ``y`` (class index or value, NaN where none
    arrived or it names no class) and how many arrived labels could not be used."""

    y: np.ndarray
    unusable: int

    @property
    def labelled(self) -> np.ndarray:
        labelled: np.ndarray = ~np.isnan(self.y)
        return labelled

    def note(self, task: Task) -> str:
        """Why some labels were left out ("" when none were)."""
        if not self.unusable:
            return ""
        what = "name no class of the version" if task == "multiclass" else "are not numbers"
        return f"{self.unusable} outcome label(s) {what}: left out"


def task_outcomes(
    spec: TaskSpec, outcome: np.ndarray, outcome_label: np.ndarray | None
) -> Outcomes:
    """The outcomes as the task reads them: binary and regression the numeric ``outcome``; a
    multiclass label (``outcome_label`` as the file gave it, else ``outcome``) mapped to its
    class index with ``spec.class_index``."""
    outcome = np.asarray(outcome, dtype=float)
    given = np.zeros(len(outcome), dtype=bool) if outcome_label is None else _present(outcome_label)
    arrived = given | ~np.isnan(outcome)
    if spec.task != "multiclass":
        return Outcomes(outcome, int((arrived & np.isnan(outcome)).sum()))
    y = np.full(len(outcome), np.nan)
    for i in np.flatnonzero(arrived):
        label = outcome_label[i] if given[i] and outcome_label is not None else outcome[i]
        index = spec.class_index(label)
        y[i] = np.nan if index is None else index
    return Outcomes(y, int((arrived & np.isnan(y)).sum()))


def _present(labels: np.ndarray) -> np.ndarray:
    return np.array([v is not None and v == v and str(v).strip() != "" for v in labels], dtype=bool)


def stacked(probabilities: Sequence[Any]) -> np.ndarray:
    """Logged multiclass probabilities (one list per row) as an ``[n, K]`` array."""
    rows = [np.asarray(p, dtype=float) for p in probabilities]
    return np.vstack(rows) if rows else np.zeros((0, 0))


__all__ = [
    "HIGHER_IS_BETTER",
    "METRICS",
    "Labelled",
    "Outcomes",
    "against_registered",
    "compare",
    "paired",
    "point_metrics",
    "stacked",
    "support",
    "task_outcomes",
    "unpaired",
    "weighted_metrics",
]
