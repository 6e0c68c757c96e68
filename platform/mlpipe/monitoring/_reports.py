"""The frame every monitor verb shares: read the logged window, then publish the verdict.

Every check (drift, canary, skew) reads the warehouse's logged predictions of
one model over a window, so it syncs first (unless told not to) and refuses a
model with no logged rows (:func:`read_logged`); and every result is a folder
under ``reports_path`` holding a JSON document, plus one row per verdict in the
warehouse's ``reports`` index, which ``promote`` and ``monitor reports`` read
(:func:`publish`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import NotFound
from mlpipe.monitoring._html import verdict_page
from mlpipe.windows import Window, utcnow

Kind = Literal["drift", "canary", "skew", "shadow"]

# The document each kind writes. Drift's index rows point at the folder, which
# also holds an Evidently report per arm; the others' point at the document.
_DOCUMENT: dict[Kind, str] = {
    "drift": "summary.json",
    "canary": "canary.json",
    "skew": "skew.json",
    "shadow": "shadow.json",
}


def read_logged(
    settings: Settings,
    model: str,
    window: Window,
    *,
    sync_first: bool,
    history: warehouse.HistorySource | None,
    notify: warehouse.Notify | None,
    arm: str | None = None,
    sample_rows: int | None = None,
    with_entities: bool = False,
) -> warehouse.PredictionWindow:
    """The model's logged predictions in ``window``, synced in first when ``sync_first``.

    ``history`` is what the sync mirrors into the warehouse's ``deployments``
    table (see :func:`mlpipe.warehouse.sync`). Raises :class:`NotFound` when the
    warehouse holds no row of ``model``.
    """
    if sync_first:
        warehouse.sync(settings, notify, history=history)
    logged = warehouse.prediction_window(
        settings,
        model,
        window.start,
        window.end,
        arm=arm,
        sample_rows=sample_rows,
        notify=notify,
        with_entities=with_entities,
    )
    if logged.total == 0:  # an empty window: is the model known at all?
        known = warehouse.models_in_warehouse(settings, notify)
        if model not in known:
            raise NotFound(
                f"model {model!r} has no logged predictions "
                f"(the warehouse has: {', '.join(known) or 'none'})"
            )
    return logged


def pruned_notes(settings: Settings, window: Window) -> list[str]:
    """What retention removed from ``window``: a note per retention whose last prune cut
    rows older than where the window starts (``rows before 2026-01-02 10:00 UTC pruned
    (retention 30 day(s))``), so a figure over what is left is not taken for the whole."""
    return [m.note for m in warehouse.prune_marks(settings) if m.covers(window.start)]


def with_entity_keys(logged: warehouse.PredictionWindow) -> Any:
    """The window's rows with each row's logged entity key (bounds are clustered by entity);
    ``logged`` is read ``with_entities``."""
    assert logged.entities is not None, "read the window with_entities"
    return logged.rows.assign(entity_key=logged.entities["entity_key"])


@dataclass(frozen=True)
class Report:
    """Where one check's result goes: a new folder ``reports_path/<model>/<UTC time>[-n]``."""

    kind: Kind
    model: str
    folder: Path
    created_at: datetime

    @property
    def document(self) -> Path:
        """The JSON document of the result."""
        return self.folder / _DOCUMENT[self.kind]


@dataclass(frozen=True)
class Finding:
    """One row of the ``reports`` index: a verdict, what it is about, and a short summary."""

    verdict: str
    summary: dict[str, Any]
    arm: str | None = None
    version: str | None = None


def new_report(settings: Settings, kind: Kind, model: str) -> Report:
    """Create the folder of a new ``kind`` report on ``model``, named after the time now."""
    now = utcnow()
    base = settings.reports_path / model / now.strftime("%Y%m%dT%H%M%SZ")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return Report(kind, model, path, now)


def publish(
    settings: Settings,
    report: Report,
    window: Window,
    payload: dict[str, Any],
    findings: Sequence[Finding],
    notify: warehouse.Notify | None,
) -> None:
    """Write ``payload`` as the report's document and index each finding, in one transaction."""
    report.document.write_text(json.dumps(payload, indent=2, default=str))
    path = report.folder if report.kind == "drift" else report.document
    entries = [
        warehouse.ReportEntry(
            id=uuid.uuid4().hex,
            kind=report.kind,
            model=report.model,
            arm=finding.arm,
            version=finding.version,
            window_start=window.start,
            window_end=window.end,
            created_at=report.created_at,
            verdict=finding.verdict,
            path=str(path),
            summary=finding.summary,
        )
        for finding in findings
    ]
    warehouse.record_reports(settings, entries, notify)


class VersusChampion(Protocol):
    """A verdict on one version against the champion (a canary or shadow analysis)."""

    report_path: str | None
    html_path: str | None

    @property
    def verdict(self) -> str: ...

    @property
    def champion_version(self) -> str | None: ...

    def to_dict(self) -> dict[str, Any]: ...


def publish_versus_champion(
    settings: Settings,
    kind: Literal["canary", "shadow"],
    window: Window,
    model: str,
    version: str | None,
    result: VersusChampion,
    notify: warehouse.Notify | None,
) -> None:
    """Write ``result`` as ``<kind>.json`` and ``<kind>.html`` (its paths set on it) and index
    its verdict under ``version`` on the ``kind`` arm."""
    report = new_report(settings, kind, model)
    html = report.folder / f"{kind}.html"
    result.report_path, result.html_path = str(report.document), str(html)
    data = result.to_dict()
    title = f"{model}: {kind} v{version} vs champion v{result.champion_version}: {result.verdict}"
    html.write_text(verdict_page(title, data, "checks", _headings(kind)))
    finding = Finding(result.verdict, data, arm=kind, version=version)
    publish(settings, report, window, data, [finding], notify)


def _headings(kind: str) -> dict[str, str]:
    """The section headings of a canary or shadow page, the candidate named as ``kind``."""
    return {
        "checks": f"checks: champion vs {kind}",
        "arm_classes": "per class, each arm on its own rows: share of its predictions; its "
        "recall and precision where outcomes arrived",
        "class_agreement": f"predicted classes, both versions on the same rows: how often the "
        f"{kind} predicts the champion's class",
        "confusion": f"champion's predicted class (rows) vs the {kind}'s (columns), same rows",
        "probability_delta": f"probability delta per class ({kind} - champion), same rows",
        "score_delta": f"score delta ({kind} - champion)",
        "disagreements": "largest disagreements",
    }


__all__ = [
    "Finding",
    "Kind",
    "Report",
    "VersusChampion",
    "new_report",
    "publish",
    "publish_versus_champion",
    "read_logged",
    "with_entity_keys",
]
