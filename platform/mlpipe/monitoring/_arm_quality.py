"""An arm's quality where outcomes arrived: mlpipe's judgement against the registered
metrics (:mod:`._quality`), Evidently's classification or regression report beside it,
titled with the version's label name, and the baseline it was judged against in words."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from mlpipe import registry
from mlpipe.config import Settings
from mlpipe.errors import MlpipeError
from mlpipe.monitoring._arm_window import ArmWindow
from mlpipe.monitoring._evidently import classification_quality
from mlpipe.monitoring._evidently import task_quality as task_quality_report
from mlpipe.monitoring._quality import (
    RegisteredMetrics,
    measured_metrics,
    quality,
    registered_metrics,
    task_quality,
)
from mlpipe.monitoring._quality_section import QualitySection
from mlpipe.monitoring._registered import baseline_words, label_name


@dataclass(frozen=True, kw_only=True)
class ArmQuality:
    """The quality section, and Evidently's report of it (None where Evidently had no rows)."""

    section: QualitySection
    report: Any = None


@dataclass(frozen=True, kw_only=True)
class _Baseline:
    registered: RegisteredMetrics | None = None
    widen: frozenset[str] = frozenset()
    tags: dict[str, str] | None = None


def _baseline(settings: Settings, model: str, version: str, win: ArmWindow) -> _Baseline:
    """What the version registered (nothing where the registry does not know it)."""
    try:
        return _Baseline(
            registered=registered_metrics(settings, model, version, win.spec.task),
            widen=measured_metrics(settings, model, version),
            tags=registry.show(settings, f"{model}/{version}").tags,
        )
    except MlpipeError:
        return _Baseline()


def arm_quality(settings: Settings, model: str, version: str, win: ArmWindow) -> ArmQuality | None:
    """The arm's quality (None: no outcome has arrived in the window)."""
    rows, spec = win.rows, win.spec
    arrived = rows["outcome"].notna()
    if "outcome_label" in rows:
        arrived |= rows["outcome_label"].notna()
    if not arrived.any():
        return None
    base = _baseline(settings, model, version, win)
    least = settings.monitor.canary_min_labels
    target = label_name(base.tags)
    report: Any = None
    if spec.task != "binary":
        section, labelled = task_quality(
            rows, win.clusters(), base.registered, least, spec, base.widen
        )
        if labelled is not None:
            figures, report = task_quality_report(spec, labelled.output, labelled.y, target)
            section = replace(section, evidently_asked=True, evidently=figures)
    else:
        section = quality(rows, win.clusters(), base.registered, least, base.widen)
        figures, report = classification_quality(rows, target)
        section = replace(section, evidently_asked=True, evidently=figures)
    words = baseline_words(base.tags, section.metric_dicts())
    return ArmQuality(section=replace(section, baseline=words), report=report)


__all__ = ["ArmQuality", "arm_quality"]
