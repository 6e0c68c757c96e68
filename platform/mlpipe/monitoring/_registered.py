"""What a quality section says of the registered version it judges: its label's name, and what
its baseline is, in words.

A version's tags (:class:`mlpipe.registry.VersionInfo`) record the metrics it is
judged against, which of them register measured itself (``mlpipe.metrics_measured``,
plus each class's recall, ``mlpipe.class_recall``) and on what
(``mlpipe.metrics_on``: the registration dataset, or the ``--eval-dataset``
holdout); the others were given with ``--metric``. ``mlpipe.label`` names the
dataset column the version was trained to predict, where register records it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlpipe.registry.tag_names import CLASS_RECALL, LABEL, METRICS_MEASURED, METRICS_ON

# What an outcome column is called where the version does not name its label.
OUTCOME = "outcome"


def label_name(tags: Mapping[str, str] | None) -> str:
    """The version's label column (``is_fraud``), else :data:`OUTCOME` (the outcomes loaded)."""
    name = (tags or {}).get(LABEL, "").strip()
    return name or OUTCOME


def baseline_words(tags: Mapping[str, str] | None, metrics: Sequence[Mapping[str, Any]]) -> str:
    """Which baseline the judged ``metrics`` (a quality section's comparisons) were held
    against: ``baseline: auc, recall measured at register on dataset train.csv (the
    registration dataset); accuracy given with --metric at register``; "" where no metric
    had a baseline (the section's note says ``no baseline``)."""
    judged = [str(m["metric"]) for m in metrics if _finite(m.get("baseline"))]
    if not judged:
        return ""
    tags = tags or {}
    measured_names = {n for n in tags.get(METRICS_MEASURED, "").split(",") if n}
    measured = [
        m
        for m in judged
        if m in measured_names or (m.startswith("recall[") and CLASS_RECALL in tags)
    ]
    given = [m for m in judged if m not in measured]
    parts = []
    if measured:
        where = tags.get(METRICS_ON, "its registration data")
        parts.append(f"{', '.join(measured)} measured at register on {where}")
    if given:
        parts.append(f"{', '.join(given)} given with --metric at register")
    return "baseline: " + "; ".join(parts)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and value == value and abs(value) != float("inf")


__all__ = ["OUTCOME", "baseline_words", "label_name"]
