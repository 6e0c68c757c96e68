"""An arm's quality section: what the labelled rows in a window say about the version.

:func:`._quality.quality` and :func:`._quality.task_quality` build it; the drift
verdict reads its alarms, stdout and the HTML banner its :meth:`QualitySection.headline`
and notes, and ``--json`` / ``summary.json`` its :meth:`QualitySection.to_dict`, whose keys
keep the order the section has always had in those documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlpipe.monitoring._label_metrics import MetricComparison
from mlpipe.tasks import Task

# The figures an arm's quality line shows, per task, in this order.
HEADLINE: dict[Task, tuple[str, ...]] = {
    "binary": ("auc", "recall", "precision", "log_loss", "labelled_rows", "status"),
    "multiclass": ("accuracy", "macro_f1", "log_loss", "labelled_rows", "status"),
    "regression": ("mae", "rmse", "bias", "labelled_rows", "status"),
}
INSUFFICIENT = "insufficient"
NOT_JUDGED = "not judged"
NO_BASELINE = "no baseline"


@dataclass(frozen=True, kw_only=True)
class QualitySection:
    """The task's figures on the labelled rows and their judgement against the registered ones.

    ``status``: ``quality`` (an alarm), ``ok``, ``no baseline``, ``not judged`` (no
    registered metrics) or ``insufficient`` (too few labels). ``metrics`` is None where
    nothing was compared; ``figures`` are the point metrics (None: undefined), empty where
    none were computed. ``evidently``: Evidently's own figures where it was asked
    (``evidently_asked``; None: it had no rows).
    """

    task: Task = "binary"
    labelled_rows: int
    rows: int
    label_lag: str
    status: str
    alarms: list[str] = field(default_factory=list)
    note: str = ""
    unusable_labels: int = 0
    labels_note: str = ""
    figures: dict[str, float | None] = field(default_factory=dict)
    class_recall: dict[str, float | None] = field(default_factory=dict)
    metrics: list[MetricComparison] | None = None
    baseline_note: str = ""
    evidently_asked: bool = False
    evidently: dict[str, Any] | None = None
    baseline: str = ""

    def headline(self) -> list[tuple[str, object]]:
        """The figures of :data:`HEADLINE` the section has, with their values, in order."""
        known: dict[str, object] = {
            **self.figures,
            "labelled_rows": self.labelled_rows,
            "status": self.status,
        }
        return [(name, known[name]) for name in HEADLINE[self.task] if name in known]

    def notes(self) -> list[str]:
        """Its notes in the order the quality lines give them ("" left out)."""
        return [n for n in (self.note, self.labels_note, self.baseline, self.baseline_note) if n]

    def to_dict(self) -> dict[str, Any]:
        """The section as the JSON documents hold it (a binary one names no task; point
        figures after the judgement for binary, before it for the other tasks)."""
        out: dict[str, Any] = {
            "labelled_rows": self.labelled_rows,
            "rows": self.rows,
            "alarms": list(self.alarms),
        }
        if self.task != "binary":
            out["task"] = self.task
        out["label_lag"] = self.label_lag
        if self.labels_note:
            out["unusable_labels"] = self.unusable_labels
            out["labels_note"] = self.labels_note
        if self.task != "binary":
            out.update(self.figures)
        out.update(self._judgement())
        if self.task == "binary":
            out.update(self.figures)
        if self.evidently_asked:
            out["evidently"] = self.evidently
        if self.baseline:
            out["baseline"] = self.baseline
        return out

    def metric_dicts(self) -> list[dict[str, Any]]:
        """Each comparison as a mapping (``metric``, ``baseline``, ``worse``, ...)."""
        return [dict(c.__dict__) for c in self.metrics or []]

    def _judgement(self) -> dict[str, Any]:
        if self.metrics is None:
            return {"status": self.status, **({"note": self.note} if self.note else {})}
        out: dict[str, Any] = {}
        if self.class_recall:
            out["class_recall"] = self.class_recall
        out["metrics"] = self.metric_dicts()
        if self.note:
            out["note"] = self.note
        out["status"] = self.status
        if self.baseline_note:
            out["baseline_note"] = self.baseline_note
        return out


__all__ = ["HEADLINE", "INSUFFICIENT", "NOT_JUDGED", "NO_BASELINE", "QualitySection"]
