"""Per-class tables of a classifier's canary or shadow analysis, classes named as the version
names them (``setosa``, not ``0``).

Two kinds of table, for two kinds of rows:

- **Two versions on the same rows** (a shadow's paired requests; a canary's rows
  re-scored by both versions): how often each version predicts a class and the
  candidate agrees (:func:`agreement_tables`, with the confusion table of their
  predicted classes), and for a multiclass pair the shadow − champion
  probability of each class (:func:`probability_deltas`).
- **Each arm on its own rows** (a canary: a sticky split sends different
  customers to each arm, so their predictions are not compared row by row):
  each arm's share of predictions per class and, where outcomes arrived, its
  recall and precision per class from what it served (:func:`arm_classes`).

The tables are informational: the verdict comes from the checks
(:mod:`._model_checks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mlpipe.monitoring import _task_metrics as tm
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import pandas as pd

_QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)


def spread(delta: Any) -> dict[str, float]:
    """Quantiles, mean, mean |delta| and max |delta| of ``delta`` (candidate − champion)."""
    values = np.asarray(delta, dtype=float)
    out = {f"p{round(q * 100)}": float(np.quantile(values, q)) for q in _QUANTILES}
    out.update(mean=float(values.mean()), mean_abs=float(np.abs(values).mean()))
    out["max_abs"] = float(np.abs(values).max())
    return out


def names_of(task: TaskSpec) -> list[str]:
    """The version's classes as text, in the model's order."""
    return [str(c) for c in task.classes]


def agreement_tables(
    champion: np.ndarray, candidate: np.ndarray, task: TaskSpec, side: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both versions' predicted class indices on the same rows → agreement per class and the
    confusion table (champion's classes in rows, ``side``'s in columns), by class name.

    A class's ``agreement`` is the share of the champion's predictions of it that
    ``side`` (``shadow`` or ``canary``) predicts too (NaN where the champion never
    predicts it).
    """
    names = names_of(task)
    if not task.is_classifier or not len(champion):
        return [], []
    table = np.zeros((len(names), len(names)), dtype=int)
    np.add.at(table, (np.asarray(champion, int), np.asarray(candidate, int)), 1)
    agreement = [
        {
            "class": name, "champion": int(table[k].sum()), side: int(table[:, k].sum()),
            "both": int(table[k, k]),
            "agreement": float(table[k, k] / table[k].sum()) if table[k].sum() else math.nan,
        }
        for k, name in enumerate(names)
    ]  # fmt: skip
    confusion = [
        {f"champion \\ {side}": name, **dict(zip(names, map(int, table[k]), strict=True))}
        for k, name in enumerate(names)
    ]
    return agreement, confusion


def probability_deltas(
    champion: np.ndarray, candidate: np.ndarray, task: TaskSpec
) -> list[dict[str, Any]]:
    """Multiclass: per class, the spread of candidate − champion probability of that class
    (``[n, K]`` probabilities of both on the same rows)."""
    if task.task != "multiclass" or not len(champion):
        return []
    delta = np.asarray(candidate, float) - np.asarray(champion, float)
    return [{"class": name, **spread(delta[:, k])} for k, name in enumerate(names_of(task))]


def served_classes(rows: pd.DataFrame, task: TaskSpec) -> np.ndarray:
    """Each logged row's predicted class index (the ``label`` it logged), -1 where it logged
    none (an error) or one outside the version's classes."""
    label = rows["label"].to_numpy(dtype=float)
    known = ~np.isnan(label) & (label >= 0) & (label < len(task.classes))
    return np.where(known, np.nan_to_num(label, nan=-1.0), -1.0).astype(int)


def true_classes(rows: pd.DataFrame, task: TaskSpec) -> np.ndarray:
    """Each row's outcome as a class index (-1: none arrived, or it names no class):
    a binary outcome is class 1 from 0.5, a multiclass one read by name or number."""
    given = rows["outcome_label"].to_numpy() if "outcome_label" in rows else None
    y = tm.task_outcomes(task, rows["outcome"].to_numpy(dtype=float), given).y
    if task.task == "binary":
        y = np.where(np.isnan(y), np.nan, (y >= 0.5).astype(float))
    classes: np.ndarray = np.nan_to_num(y, nan=-1.0).astype(int)
    return classes


def arm_classes(arms: Mapping[str, pd.DataFrame], task: TaskSpec) -> list[dict[str, Any]]:
    """Per class, each arm's share of its own predictions, and where outcomes arrived on
    either arm, each arm's labelled rows of the class and its recall and precision of it
    (from the classes it served; NaN where the arm has no row to divide by)."""
    if not task.is_classifier:
        return []
    names = names_of(task)
    served = {arm: served_classes(rows, task) for arm, rows in arms.items()}
    truth = {arm: true_classes(rows, task) for arm, rows in arms.items()}
    labelled = any((y >= 0).any() for y in truth.values())
    table = []
    for k, name in enumerate(names):
        row: dict[str, Any] = {"class": name}
        for arm, pred in served.items():
            predicted = pred[pred >= 0]
            row[f"{arm}_share"] = float(np.mean(predicted == k)) if len(predicted) else math.nan
        if labelled:
            for arm, pred in served.items():
                y = truth[arm]
                row[f"{arm}_labelled"] = int((y == k).sum())
                row[f"{arm}_recall"] = _share(pred[y == k] == k)
                row[f"{arm}_precision"] = _share(y[(pred == k) & (y >= 0)] == k)
        table.append(row)
    return table


def _share(hits: np.ndarray) -> float:
    return float(hits.mean()) if len(hits) else math.nan


__all__ = [
    "agreement_tables",
    "arm_classes",
    "names_of",
    "probability_deltas",
    "served_classes",
    "spread",
    "true_classes",
]
