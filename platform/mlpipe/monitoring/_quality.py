"""Quality against the version's registered metrics, on the labelled rows of a window.

With outcomes in the window, the task's metrics with entity-clustered
bootstrap intervals (binary: AUC, recall and precision at the version's
threshold and log loss, :mod:`._label_metrics`; multiclass: accuracy, macro F1,
log loss; regression: MAE, RMSE, bias, :mod:`._task_metrics`; a classifier's
recall of each class, :mod:`._class_recall`), against the metrics registered
with the version (measured by register on its training data or a holdout, or
given): :class:`RegisteredMetrics`. A metric whose whole one-sided 99 % interval
is worse than the registered value by more than its margin is a ``quality``
alarm. The result is a :class:`._quality_section.QualitySection`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from mlpipe import registry
from mlpipe.config import Settings
from mlpipe.errors import NotFound
from mlpipe.monitoring import _class_recall as cr
from mlpipe.monitoring import _label_metrics as lm
from mlpipe.monitoring import _task_metrics as tm
from mlpipe.monitoring._quality_section import (
    INSUFFICIENT,
    NO_BASELINE,
    NOT_JUDGED,
    QualitySection,
)
from mlpipe.registry.tag_names import METRICS_MEASURED
from mlpipe.tasks import Task, TaskSpec
from mlpipe.windows import duration_text

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

QUALITY_ALPHA = 0.01
# Registered metric names (as demo/_training.py and ``register --metric`` write them) per metric.
_REGISTERED = {
    "auc": ("auc",),
    "recall": ("recall",),
    "precision": ("precision",),
    "log_loss": ("log_loss", "logloss"),
    "accuracy": ("accuracy",),
    "macro_f1": ("macro_f1", "f1_macro"),
    "mae": ("mae",),
    "rmse": ("rmse",),
    "bias": ("bias",),
}
_NO_METRICS = "the version has no registered metrics to compare with"


@dataclass(frozen=True, kw_only=True)
class RegisteredMetrics:
    """What a version is judged against: its task's metrics (NaN where absent), then each
    class's recall (:func:`._class_recall.registered`, classes in order)."""

    metrics: dict[str, float]
    class_recall: dict[str, cr.RegisteredRecall] = field(default_factory=dict)

    def missing(self) -> list[str]:
        """The metrics without a figure, in order: they are not judged."""
        values = {**self.metrics, **{k: r.value for k, r in self.class_recall.items()}}
        return [k for k, v in values.items() if math.isnan(v)]

    def count(self) -> int:
        return len(self.metrics) + len(self.class_recall)


def version_task(settings: Settings, model: str, version: str | None) -> TaskSpec:
    """The version's task from the registry (binary for a version it does not know).

    An unreachable registry raises StoreUnavailable: judging a multiclass or
    regression version by binary rules would be wrong without a word.
    """
    if version is None:
        return TaskSpec()
    try:
        return registry.show(settings, f"{model}/{version}").task
    except NotFound:
        return TaskSpec()


def registered_metrics(
    settings: Settings, model: str, version: str, task: Task = "binary"
) -> RegisteredMetrics:
    """The version's registered metrics under the task's metric names (NaN where absent;
    binary: :data:`lm.METRICS`, else :data:`tm.METRICS`), and its per-class recall where
    it records one."""
    info = registry.show(settings, f"{model}/{version}")
    tags = info.metrics
    out = {}
    for metric in tm.METRICS[task]:
        found = [tags[n] for n in _REGISTERED[metric] if n in tags]
        out[metric] = float(found[0]) if found else float("nan")
    return RegisteredMetrics(metrics=out, class_recall=cr.registered(info))


def measured_metrics(settings: Settings, model: str, version: str) -> frozenset[str]:
    """The version's registered metrics that register measured on its own training data
    (optimistic: judged with wider margins, :func:`._label_metrics.training_factor`), its
    per-class recall included; none where it measured them on a holdout."""
    info = registry.show(settings, f"{model}/{version}")
    if info.baseline_on_holdout:
        return frozenset()
    names = info.tags.get(METRICS_MEASURED, "")
    return frozenset(n for n in names.split(",") if n) | frozenset(cr.registered(info))


def _widened_note(comparisons: list[lm.MetricComparison], widen: frozenset[str]) -> str:
    judged = sorted(widen & {c.metric for c in comparisons})
    if not judged:
        return ""
    return (
        f"{', '.join(judged)} judged against the version's own figures on its "
        "registration dataset (optimistic): only a collapse alarms (margins "
        f"x{lm.TRAINING_MARGIN_FACTOR:g}, x{lm.TRAINING_RELATIVE_FACTOR:g} for relative "
        "ones); register with --eval-dataset (a holdout) for a tight check"
    )


def _too_few(labelled: int, min_labels: int) -> str:
    return f"{labelled} labelled request(s) (< {min_labels}): not judged"


def _finite(point: dict[str, float]) -> dict[str, float | None]:
    return {k: (None if math.isnan(v) else v) for k, v in point.items()}


def quality(
    rows: pd.DataFrame,
    clusters: np.ndarray,
    registered: RegisteredMetrics | None,
    min_labels: int,
    widen: frozenset[str] = frozenset(),
) -> QualitySection:
    """The quality section of a binary arm: figures, comparisons, label lag, and the alarms.

    ``registered``: the version's metrics (:func:`registered_metrics`), None when unknown.
    """
    labelled = rows["outcome"].notna().to_numpy()
    n = int(labelled.sum())
    lag = label_lag(rows, labelled)
    if n < min_labels:
        return QualitySection(
            labelled_rows=n, rows=len(rows), label_lag=lag, status=INSUFFICIENT,
            note=_too_few(n, min_labels),
        )  # fmt: skip
    if registered is None:
        return QualitySection(
            labelled_rows=n, rows=len(rows), label_lag=lag, status=NOT_JUDGED, note=_NO_METRICS
        )
    part = rows[labelled]
    scored = lm.Scored(
        part["score"].to_numpy(dtype=float),
        part["label"].to_numpy(dtype=float) >= 0.5,
        part["outcome"].round().to_numpy(dtype=int),
        clusters[labelled],
    )
    draws = lm.weighted_metrics(scored, lm.cluster_weights(scored.clusters, lm.BOOTSTRAP_DRAWS))
    deltas = {k: draws[k] - registered.metrics[k] for k in lm.METRICS}
    point = lm.point_metrics(scored)
    comparisons = lm.compare(
        deltas, registered.metrics, point, lm.support(scored), alpha=QUALITY_ALPHA, widen=widen
    )
    per_class, judged = cr.compare(
        scored.flagged.astype(int), scored.y, scored.clusters, registered.class_recall,
        QUALITY_ALPHA, widen,
    )  # fmt: skip
    comparisons += judged
    status, note = _status(comparisons, registered)
    return QualitySection(
        labelled_rows=n, rows=len(rows), label_lag=lag, status=status, note=note,
        alarms=_alarms(comparisons), figures=_finite(point), class_recall=per_class,
        metrics=comparisons, baseline_note=_widened_note(comparisons, widen),
    )  # fmt: skip


def _alarms(comparisons: list[lm.MetricComparison]) -> list[str]:
    return [c.metric for c in comparisons if c.worse]


def _status(
    comparisons: list[lm.MetricComparison], registered: RegisteredMetrics
) -> tuple[str, str]:
    """``quality`` (an alarm), ``ok``, or ``no baseline`` where no registered metric is
    known: a check against nothing is not a pass; and the note naming the metrics without
    one ("" where every metric had one)."""
    missing = registered.missing()
    if _alarms(comparisons):
        status = "quality"
    elif len(missing) == registered.count():
        note = (
            "no baseline: the version has no registered metrics to judge these labels "
            "against (register it again to record its metrics on its dataset, or give --metric)"
        )
        return NO_BASELINE, note
    else:
        status = "ok"
    return status, (f"no baseline for {', '.join(missing)}: not judged" if missing else "")


def alarm_text(metric: str) -> str:
    """A quality alarm in words, its direction the metric's own (log loss rises; a class's
    recall, named, falls)."""
    if (per_class := cr.alarm_text(metric)) is not None:
        return per_class
    side = "below" if tm.HIGHER_IS_BETTER.get(metric, True) else "above"
    if metric == "bias":
        return "quality: |bias| above the registered value"
    return f"quality: {metric} {side} the registered value"


def task_quality(
    rows: pd.DataFrame,
    clusters: np.ndarray,
    registered: RegisteredMetrics | None,
    min_labels: int,
    spec: TaskSpec,
    widen: frozenset[str] = frozenset(),
) -> tuple[QualitySection, tm.Labelled | None]:
    """:func:`quality` for a multiclass or regression version: the task's metrics on the
    labelled rows (:mod:`._task_metrics`), judged against its registered metrics; also the
    labelled rows (None when too few) for Evidently's report."""
    given = rows["outcome_label"].to_numpy() if "outcome_label" in rows else None
    truth = tm.task_outcomes(spec, rows["outcome"].to_numpy(dtype=float), given)
    labelled = truth.labelled
    if spec.task == "multiclass":
        labelled &= rows["probabilities"].notna().to_numpy()
    n = int(labelled.sum())
    section = QualitySection(
        task=spec.task, labelled_rows=n, rows=len(rows), label_lag=label_lag(rows, labelled),
        unusable_labels=truth.unusable, labels_note=truth.note(spec.task),
        status=INSUFFICIENT, note=_too_few(n, min_labels),
    )  # fmt: skip
    if n < min_labels:
        return section, None
    if spec.task == "multiclass":
        output = tm.stacked(rows["probabilities"].to_numpy()[labelled])
    else:
        output = rows["score"].to_numpy(dtype=float)[labelled]
    scored = tm.Labelled(output, truth.y[labelled], clusters[labelled])
    known = registered.metrics if registered else dict.fromkeys(tm.METRICS[spec.task], math.nan)
    point, comparisons = tm.against_registered(spec.task, scored, known, QUALITY_ALPHA, widen)
    if registered is None:
        return replace(section, figures=_finite(point), status=NOT_JUDGED, note=_NO_METRICS), scored
    per_class: dict[str, float | None] = {}
    if spec.task == "multiclass":
        per_class, judged = cr.compare(
            output.argmax(axis=1), scored.y.astype(int), scored.clusters,
            registered.class_recall, QUALITY_ALPHA, widen,
        )  # fmt: skip
        comparisons += judged
    status, note = _status(comparisons, registered)
    judged_section = replace(
        section, figures=_finite(point), status=status, note=note, alarms=_alarms(comparisons),
        class_recall=per_class, metrics=comparisons,
        baseline_note=_widened_note(comparisons, widen),
    )  # fmt: skip
    return judged_section, scored


def label_lag(rows: pd.DataFrame, labelled: np.ndarray) -> str:
    """How far behind the window's end the labels are, in words."""
    if not labelled.any():
        return f"no outcome has arrived for the {len(rows)} request(s) in the window"
    newest: datetime = rows["ts"][labelled].max()
    gap = rows["ts"].max() - newest
    return (
        f"outcomes for {int(labelled.sum())} of {len(rows)} request(s); the newest labelled "
        f"request is {duration_text(gap.total_seconds())} older than the newest request"
    )


__all__ = [
    "QUALITY_ALPHA",
    "RegisteredMetrics",
    "alarm_text",
    "label_lag",
    "measured_metrics",
    "quality",
    "registered_metrics",
    "task_quality",
    "version_task",
]
