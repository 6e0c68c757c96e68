"""A version's own metrics on a labelled dataset, recorded at register as its quality baseline.

Without a baseline, ``monitor drift`` cannot judge labelled traffic: a model at
chance level would pass. So register scores the dataset (a sample of it) the
way serving scores it and records the metrics the quality check judges, under
the same names (binary: AUC, recall and precision at the threshold, log loss;
multiclass: accuracy, macro F1, log loss; regression: MAE, RMSE, bias), and a
classifier's recall of each class (the quality check names a class whose recall
collapses). Metrics given with ``--metric`` win. On the training set the
figures are optimistic; on a holdout (``--eval-dataset``) they are an honest
estimate. The tags :data:`tag_names.METRICS_ON` and :data:`tag_names.METRICS_SOURCE`
say which dataset they are on (see :mod:`._baseline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlpipe.registry._input_schema import InputSchema
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pandas as pd

SAMPLE_ROWS = 20_000  # scored for the baseline; enough for every metric to the 3rd decimal


@dataclass(frozen=True)
class Measured:
    """A version's figures on labelled rows: the task's metrics (under the quality check's
    names), each class's recall and the rows of each class it rests on (class name ->
    recall, -> rows; classifiers) and the rows scored."""

    metrics: dict[str, float]
    class_recall: dict[str, float]
    class_rows: dict[str, int]
    rows: int


def dataset_metrics(
    task: TaskSpec,
    output_of: Callable[[Any], np.ndarray],
    schema: InputSchema,
    x: pd.DataFrame,
    labels: pd.Series,
) -> Measured:
    """The task's metrics on rows ``x`` with true ``labels``; ``output_of`` scores rows as
    serving hands them over and returns the task's checked output. Rows without a usable
    label are left out, and so is a metric that is undefined on them."""
    import math

    import numpy as np

    y = _targets(task, labels)
    keep = ~np.isnan(y)
    if keep.sum() == 0:
        return Measured({}, {}, {}, 0)
    x, y = x[keep], y[keep]
    if len(x) > SAMPLE_ROWS:
        pick = np.sort(np.random.default_rng(0).choice(len(x), SAMPLE_ROWS, replace=False))
        x, y = x.iloc[pick], y[pick]
    output = output_of(_as_served(schema, x))
    figures = _metrics(task, output, y)
    recall, rows = class_recall(task, output, y)
    return Measured({k: v for k, v in figures.items() if not math.isnan(v)}, recall, rows, len(y))


def _targets(task: TaskSpec, labels: pd.Series) -> np.ndarray:
    """Each label as the quality check reads an outcome: a class index, or a number."""
    import numpy as np
    import pandas as pd

    if task.is_classifier:
        index = [None if pd.isna(v) else task.class_index(v) for v in labels]
        return np.array([np.nan if i is None else i for i in index], dtype=float)
    values: np.ndarray = pd.to_numeric(labels, errors="coerce").to_numpy(dtype=float)
    return values


def _as_served(schema: InputSchema, x: pd.DataFrame) -> Any:
    """The rows as serving hands them to the model: a float array, or the schema's frame."""
    import numpy as np

    if not schema.frame:
        return x.to_numpy(dtype=np.float64)
    from mlpipe.registry._register import _as_served as served_value

    rows = [
        [served_value(c, v) for c, v in zip(schema.columns, row, strict=True)]
        for row in x.itertuples(index=False)
    ]
    return schema.to_frame(rows)


def _metrics(task: TaskSpec, output: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """scikit-learn's metrics, under the names the quality check judges.

    Computed here rather than with monitoring's bootstrap functions: the
    registry sits below monitoring (tests/unit/test_layers.py), and on unit
    weights the two agree (``tests/unit/registry/test_dataset_metrics.py``).
    """
    import numpy as np
    from sklearn import metrics as m

    if task.task == "regression":
        error = np.asarray(output, dtype=float) - y.astype(float)
        return {
            "mae": float(np.mean(np.abs(error))),
            "rmse": float(np.sqrt(np.mean(error**2))),
            "bias": float(np.mean(error)),
        }
    truth = y.astype(int)
    if task.task == "binary":
        scores = np.clip(np.asarray(output, dtype=float), 1e-7, 1 - 1e-7)
        flagged = (scores >= task.threshold).astype(int)
        out = {
            "recall": float(m.recall_score(truth, flagged, zero_division=np.nan)),
            "precision": float(m.precision_score(truth, flagged, zero_division=np.nan)),
            "log_loss": float(m.log_loss(truth, scores, labels=[0, 1])),
        }
        if len(np.unique(truth)) == 2:
            out["auc"] = float(m.roc_auc_score(truth, scores))
        return out
    probs = np.asarray(output, dtype=float)
    probs = probs / np.clip(probs.sum(axis=1, keepdims=True), 1e-7, None)
    k = probs.shape[1]
    pred = probs.argmax(axis=1)
    true_class = probs[np.arange(len(truth)), truth]
    return {
        "accuracy": float(np.mean(pred == truth)),
        "macro_f1": float(m.f1_score(truth, pred, labels=list(range(k)), average="macro")),
        # the true class's probability, clipped, as the quality check computes it (sklearn's
        # log_loss warns that clipped rows no longer sum to one)
        "log_loss": float(-np.mean(np.log(np.clip(true_class, 1e-7, 1 - 1e-7)))),
    }


def class_recall(
    task: TaskSpec, output: np.ndarray, y: np.ndarray
) -> tuple[dict[str, float], dict[str, int]]:
    """Each class's recall (the share of its rows predicted as it) and its rows, by class
    name in the model's order: binary at the threshold, multiclass by the most probable
    class. A class without a row is left out; a regression has none."""
    import numpy as np

    if not task.is_classifier:
        return {}, {}
    truth = y.astype(int)
    if task.task == "binary":
        predicted = (np.asarray(output, dtype=float) >= task.threshold).astype(int)
    else:
        predicted = np.asarray(output, dtype=float).argmax(axis=1)
    recall, counts = {}, {}
    for i, name in enumerate(task.classes):
        rows = truth == i
        if rows.any():
            recall[str(name)] = float(np.mean(predicted[rows] == i))
            counts[str(name)] = int(rows.sum())
    return recall, counts
