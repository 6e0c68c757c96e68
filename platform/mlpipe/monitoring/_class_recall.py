"""Each class's recall in a labelled window, against the recall register measured for it.

A classifier can keep its headline figures while one class collapses: a
multiclass model that stops predicting a rare class loses little accuracy, and
a binary model that flags every row keeps its recall. Register records each
class's recall (``mlpipe.class_recall``, :attr:`VersionInfo.class_recall`); the
quality check judges each class's recall in the window against it, the way it
judges ``recall``: entity-clustered bootstrap, one-sided non-inferiority with
a margin of 0.05 (x5 against a baseline measured on the training data), not
judged with fewer than ``MIN_SUPPORT`` entities of the class. An alarm names
the class.

Binary: the recall of class 1 is ``recall`` already; only class 0's (the share
of negatives left unflagged) is judged here.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np

from mlpipe.monitoring import _label_metrics as lm

if TYPE_CHECKING:
    from mlpipe.registry import VersionInfo

MARGIN = lm.MARGINS["recall"]
_PREFIX, _SUFFIX = "recall[", "]"


def key(name: object) -> str:
    """The metric name a class's recall goes by in a quality section: ``recall[setosa]``."""
    return f"{_PREFIX}{name}{_SUFFIX}"


def class_of(metric: str) -> str | None:
    """The class a :func:`key` names, None for any other metric."""
    if metric.startswith(_PREFIX) and metric.endswith(_SUFFIX):
        return metric[len(_PREFIX) : -len(_SUFFIX)]
    return None


def registered(info: VersionInfo) -> dict[str, float]:
    """The recall register measured for each class judged, under :func:`key`, in the
    version's class order (multiclass: every class; binary: class 0), NaN for a class it
    had no row of; empty for a version that records none (a regression, or one registered
    before it was measured)."""
    recall = info.class_recall
    if not recall:
        return {}
    spec = info.task
    classes = spec.classes[:1] if spec.task == "binary" else spec.classes
    return {key(c): recall.get(str(c), math.nan) for c in classes}


def compare(
    predicted: np.ndarray,
    y: np.ndarray,
    clusters: np.ndarray,
    baseline: dict[str, float],
    alpha: float,
    widen: Collection[str] = (),
) -> tuple[dict[str, float | None], list[lm.MetricComparison]]:
    """Each class's recall in the window (``predicted`` and true ``y`` class indices per
    row) and its comparison with ``baseline``'s class keys, which are taken to be classes
    0, 1, ... in order (as :func:`registered` gives them). A class key in ``widen`` was
    measured on the training data: its margin is :func:`lm.training_factor` times wider."""
    keys = [k for k in baseline if class_of(k) is not None]
    if not keys:
        return {}, []
    w = lm.cluster_weights(clusters, lm.BOOTSTRAP_DRAWS)
    figures: dict[str, float | None] = {}
    out = []
    for index, metric in enumerate(keys):
        in_class = y == index
        hit = in_class & (predicted == index)
        draws = _ratio(w @ hit.astype(float), w @ in_class.astype(float))
        window = float(hit.sum() / in_class.sum()) if in_class.any() else math.nan
        figures[str(class_of(metric))] = None if math.isnan(window) else window
        base = baseline[metric]
        margin = MARGIN * (lm.training_factor(metric) if metric in widen else 1.0)
        support = len(np.unique(clusters[in_class]))
        judged = lm.judge(
            metric, base, window, window - base, draws - base, margin, support, True, alpha
        )
        out.append(judged)
    return figures, out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def alarm_text(metric: str) -> str | None:
    """A class's recall alarm in words (None for any other metric)."""
    name = class_of(metric)
    if name is None:
        return None
    return f"quality: recall of class {name!r} below the registered value"
