"""Prediction drift against the version's own scores, and quality against its registered metrics.

Prediction drift compares what the version served with what the *same
version* scores on its reference: the reference's features are scored with
the verified model on first use (the registry stores the reference's inputs,
not its scores) and the scores cached beside the null distributions. Training
labels are not a reference for scores: a model's positive rate is not the
base rate.

Quality: with outcomes in the window, the task's metrics with entity-clustered
bootstrap intervals (binary: AUC, recall and precision at the version's
threshold and log loss, :mod:`._label_metrics`; multiclass: accuracy, macro F1,
log loss; regression: MAE, RMSE, bias, :mod:`._task_metrics`; a classifier's
recall of each class, :mod:`._class_recall`), against the metrics registered
with the version (measured by register on its training data or a holdout, or
given). A metric whose whole one-sided 99 % interval is worse than the
registered value by more than its margin is a ``quality`` alarm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe import registry
from mlpipe.config import Settings
from mlpipe.errors import NotFound
from mlpipe.monitoring import _class_recall as cr
from mlpipe.monitoring import _label_metrics as lm
from mlpipe.monitoring import _task_metrics as tm
from mlpipe.monitoring._calibration import MIN_EFFECT, reference_digest, safe_name, severity
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


@dataclass(frozen=True)
class ReferenceScores:
    scores: np.ndarray
    threshold: float

    @property
    def positive_rate(self) -> float:
        return float((self.scores >= self.threshold).mean())


def reference_scores(
    settings: Settings, model: str, version: str, reference: pd.DataFrame, folder: Path
) -> ReferenceScores:
    """The version's scores on its reference, cached; raises MlpipeError if it cannot load."""
    import numpy as np

    path = (
        folder / safe_name(model) / safe_name(version) / f"scores-{reference_digest(reference)}.npz"
    )
    if path.exists():
        cached = np.load(path)
        return ReferenceScores(cached["scores"], float(cached["threshold"]))
    loaded = registry.load_verified(settings, model, version)
    scores = np.asarray(loaded.predict_scores(loaded.inputs_from(reference)), dtype=float)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, scores=scores, threshold=np.array(loaded.threshold))
    tmp.replace(path)
    return ReferenceScores(scores, loaded.threshold)


@dataclass(frozen=True)
class RateTest:
    """Served positive rate against the reference's, with the cluster design effect."""

    window_rate: float
    reference_rate: float
    z: float
    critical: float
    effect: float  # Cohen's h
    significant: bool
    drifted: bool
    severity: str | None


def positive_rate_test(
    flagged: np.ndarray, design: float, reference_rate: float, reference_rows: int, alpha: float
) -> RateTest:
    """Two-proportion z-test (window variance inflated by ``design``), effect Cohen's h."""
    from scipy.stats import norm

    n = len(flagged)
    rate = float(flagged.mean())
    p = min(max(reference_rate, 0.5 / reference_rows), 1 - 0.5 / reference_rows)
    se = math.sqrt(p * (1 - p) * (design / n + 1 / reference_rows))
    z = (rate - reference_rate) / se
    critical = float(norm.isf(alpha / 2))
    h = abs(2 * math.asin(math.sqrt(rate)) - 2 * math.asin(math.sqrt(reference_rate)))
    significant = abs(z) > critical
    drifted = significant and h >= MIN_EFFECT
    return RateTest(
        rate, reference_rate, z, critical, h, significant, drifted, severity(h) if drifted else None
    )


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
) -> dict[str, float]:
    """The version's registered metrics under the task's metric names (NaN where absent;
    binary: :data:`lm.METRICS`, else :data:`tm.METRICS`), then its per-class recall where
    it records one (:func:`._class_recall.registered`, classes in order)."""
    info = registry.show(settings, f"{model}/{version}")
    tags = info.metrics
    out = {}
    for metric in tm.METRICS[task]:
        found = [tags[n] for n in _REGISTERED[metric] if n in tags]
        out[metric] = float(found[0]) if found else float("nan")
    out.update(cr.registered(info))
    return out


def measured_metrics(settings: Settings, model: str, version: str) -> frozenset[str]:
    """The version's registered metrics that register measured on its own training data
    (optimistic: judged with wider margins, :func:`._label_metrics.training_factor`), its
    per-class recall included; none where it measured them on a holdout."""
    info = registry.show(settings, f"{model}/{version}")
    if info.baseline_on_holdout:
        return frozenset()
    names = info.tags.get(_METRICS_MEASURED, "")
    return frozenset(n for n in names.split(",") if n) | frozenset(cr.registered(info))


_METRICS_MEASURED = "mlpipe.metrics_measured"


def _widened_note(out: dict[str, Any], widen: frozenset[str]) -> None:
    judged = sorted(widen & {c["metric"] for c in out.get("metrics", [])})
    if judged:
        out["baseline_note"] = (
            f"{', '.join(judged)} judged against the version's own figures on its "
            "registration dataset (optimistic): only a collapse alarms (margins "
            f"x{lm.TRAINING_MARGIN_FACTOR:g}, x{lm.TRAINING_RELATIVE_FACTOR:g} for relative "
            "ones); register with --eval-dataset (a holdout) for a tight check"
        )


def quality(
    rows: pd.DataFrame,
    clusters: np.ndarray,
    registered: dict[str, float] | None,
    min_labels: int,
    widen: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The quality section of an arm: figures, comparisons, label lag, and the alarms.

    ``registered``: the version's metrics (:func:`registered_metrics`), None when unknown.
    """
    import numpy as np

    labelled = rows["outcome"].notna().to_numpy()
    out: dict[str, Any] = {"labelled_rows": int(labelled.sum()), "rows": len(rows), "alarms": []}
    out["label_lag"] = label_lag(rows, labelled)
    if labelled.sum() < min_labels:
        out["status"] = "insufficient"
        out["note"] = f"{int(labelled.sum())} labelled request(s) (< {min_labels}): not judged"
        return out
    if registered is None:
        out["status"] = "not judged"
        out["note"] = "the version has no registered metrics to compare with"
        return out
    part = rows[labelled]
    scored = lm.Scored(
        part["score"].to_numpy(dtype=float),
        part["label"].to_numpy(dtype=float) >= 0.5,
        part["outcome"].round().to_numpy(dtype=int),
        clusters[labelled],
    )
    draws = lm.weighted_metrics(scored, lm.cluster_weights(scored.clusters, lm.BOOTSTRAP_DRAWS))
    deltas = {k: draws[k] - registered[k] for k in lm.METRICS}
    point = lm.point_metrics(scored)
    comparisons = lm.compare(
        deltas, registered, point, lm.support(scored), alpha=QUALITY_ALPHA, widen=widen
    )
    per_class, judged = cr.compare(
        scored.flagged.astype(int), scored.y, scored.clusters, registered, QUALITY_ALPHA, widen
    )
    comparisons += judged
    if per_class:
        out["class_recall"] = per_class
    out["metrics"] = [c.__dict__ for c in comparisons]
    out["alarms"] = [c.metric for c in comparisons if c.worse]
    out["status"] = _status(out, registered)
    _widened_note(out, widen)
    out.update({k: (None if np.isnan(v) else v) for k, v in point.items()})
    return out


NO_BASELINE = "no baseline"


def _status(out: dict[str, Any], registered: dict[str, float]) -> str:
    """``quality`` (an alarm), ``ok``, or ``no baseline`` where no registered metric is
    known: a check against nothing is not a pass. Notes the metrics without one."""
    missing = [k for k, v in registered.items() if math.isnan(v)]
    if out["alarms"]:
        status = "quality"
    elif len(missing) == len(registered):
        out["note"] = (
            "no baseline: the version has no registered metrics to judge these labels "
            "against (register it again to record its metrics on its dataset, or give --metric)"
        )
        return NO_BASELINE
    else:
        status = "ok"
    if missing:
        out["note"] = f"no baseline for {', '.join(missing)}: not judged"
    return status


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
    registered: dict[str, float] | None,
    min_labels: int,
    spec: TaskSpec,
    widen: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], tm.Labelled | None]:
    """:func:`quality` for a multiclass or regression version: the task's metrics on the
    labelled rows (:mod:`._task_metrics`), judged against its registered metrics; also the
    labelled rows (None when too few) for Evidently's report."""
    import numpy as np

    given = rows["outcome_label"].to_numpy() if "outcome_label" in rows else None
    truth = tm.task_outcomes(spec, rows["outcome"].to_numpy(dtype=float), given)
    labelled = truth.labelled
    if spec.task == "multiclass":
        labelled &= rows["probabilities"].notna().to_numpy()
    n = int(labelled.sum())
    out: dict[str, Any] = {"labelled_rows": n, "rows": len(rows), "alarms": [], "task": spec.task}
    out["label_lag"] = label_lag(rows, labelled)
    if note := truth.note(spec.task):
        out["unusable_labels"] = truth.unusable
        out["labels_note"] = note
    if n < min_labels:
        out["status"] = "insufficient"
        out["note"] = f"{n} labelled request(s) (< {min_labels}): not judged"
        return out, None
    if spec.task == "multiclass":
        output = tm.stacked(rows["probabilities"].to_numpy()[labelled])
    else:
        output = rows["score"].to_numpy(dtype=float)[labelled]
    scored = tm.Labelled(output, truth.y[labelled], clusters[labelled])
    known = registered or dict.fromkeys(tm.METRICS[spec.task], float("nan"))
    point, comparisons = tm.against_registered(spec.task, scored, known, QUALITY_ALPHA, widen)
    out.update({k: (None if np.isnan(v) else v) for k, v in point.items()})
    if registered is None:
        out["status"] = "not judged"
        out["note"] = "the version has no registered metrics to compare with"
        return out, scored
    if spec.task == "multiclass":
        per_class, judged = cr.compare(
            output.argmax(axis=1), scored.y.astype(int), scored.clusters, registered,
            QUALITY_ALPHA, widen,
        )  # fmt: skip
        comparisons += judged
        if per_class:
            out["class_recall"] = per_class
    out["metrics"] = [c.__dict__ for c in comparisons]
    out["alarms"] = [c.metric for c in comparisons if c.worse]
    out["status"] = _status(out, registered)
    _widened_note(out, widen)
    return out, scored


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
