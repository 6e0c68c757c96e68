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

The registered recall is an estimate too: a class with 86 rows in a holdout
has a recall known to about +/-0.04, as large as the margin, and a clean window
judged against it as if it were exact false-alarmed (a 400-row holdout, one
class 0.85 where the model's recall is 0.78). Where register recorded the rows
of each class (``mlpipe.class_support``), each bootstrap draw of the window's
recall is compared with a draw of the baseline's (binomial, normal
approximation), so the bound holds both samples' error.

Binary: the recall of class 1 is ``recall`` already; only class 0's (the share
of negatives left unflagged) is judged here.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mlpipe.monitoring import _label_metrics as lm

if TYPE_CHECKING:
    from mlpipe.registry import VersionInfo

MARGIN = lm.MARGINS["recall"]
_PREFIX, _SUFFIX = "recall[", "]"


@dataclass(frozen=True, kw_only=True)
class RegisteredRecall:
    """A class's registered recall (NaN: register had no row of it), and the labelled rows
    of the class it was measured on (0: unknown)."""

    value: float
    support: int = 0


def key(name: object) -> str:
    """The metric name a class's recall goes by in a quality section: ``recall[setosa]``."""
    return f"{_PREFIX}{name}{_SUFFIX}"


def class_of(metric: str) -> str | None:
    """The class a :func:`key` names, None for any other metric."""
    if metric.startswith(_PREFIX) and metric.endswith(_SUFFIX):
        return metric[len(_PREFIX) : -len(_SUFFIX)]
    return None


def registered(info: VersionInfo) -> dict[str, RegisteredRecall]:
    """The recall register measured for each class judged, with its support, under
    :func:`key`, in the version's class order (multiclass: every class; binary: class 0),
    NaN for a class it had no row of; empty for a version that records none (a regression,
    or one registered before it was measured)."""
    recall, rows = info.class_recall, info.class_support
    if not recall:
        return {}
    spec = info.task
    classes = spec.classes[:1] if spec.task == "binary" else spec.classes
    return {
        key(c): RegisteredRecall(value=recall.get(str(c), math.nan), support=rows.get(str(c), 0))
        for c in classes
    }


def compare(
    predicted: np.ndarray,
    y: np.ndarray,
    clusters: np.ndarray,
    baseline: Mapping[str, RegisteredRecall],
    alpha: float,
    widen: Collection[str] = (),
) -> tuple[dict[str, float | None], list[lm.MetricComparison]]:
    """Each class's recall in the window (``predicted`` and true ``y`` class indices per
    row) and its comparison with ``baseline``'s class keys, which are taken to be classes
    0, 1, ... in order (as :func:`registered` gives them). A class key in ``widen`` was
    measured on the training data: its margin is :func:`lm.training_factor` times wider.
    A baseline that knows its support adds its sampling error."""
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
        base = float(baseline[metric].value)
        reference = _baseline_draws(baseline[metric], len(draws), index)
        margin = MARGIN * (lm.training_factor(metric) if metric in widen else 1.0)
        support = len(np.unique(clusters[in_class]))
        judged = lm.judge(
            metric, base, window, window - base, draws - reference, margin, support, True, alpha
        )
        out.append(judged)
    return figures, out


def _baseline_draws(figure: RegisteredRecall, draws: int, seed: int) -> np.ndarray | float:
    """The registered recall, or (its support known) draws of it from its sampling error."""
    value, rows = float(figure.value), figure.support
    if not rows or math.isnan(value):
        return value
    p = min(max(value, 0.5 / rows), 1 - 0.5 / rows)  # 0 or 1 still has an error
    spread = math.sqrt(p * (1 - p) / rows)
    return value + np.random.default_rng(seed).normal(0.0, spread, draws)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def alarm_text(metric: str) -> str | None:
    """A class's recall alarm in words (None for any other metric)."""
    name = class_of(metric)
    if name is None:
        return None
    return f"quality: recall of class {name!r} below the registered value"
