"""An arm's drift result in words, and its Evidently reports on disk.

The lines here are said twice: on stdout by ``mlpipe monitor drift`` and at the
top of each of the arm's HTML reports, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mlpipe.monitoring._calibration import MIN_EFFECT
from mlpipe.monitoring._calibration_statement import CalibrationStatement, thresholds_text
from mlpipe.monitoring._drift_verdict import ArmDrift
from mlpipe.monitoring._html import write_evidently_html


def arm_title(model: str, arm: ArmDrift) -> str:
    """One arm's (one version's) verdict line, as stdout and the HTML report both say it."""
    entities = "" if arm.entities is None else f" from {arm.entities} entities"
    return (
        f"{model} {arm.arm} v{arm.version}: {arm.verdict} — {arm.rows_tested} of {arm.rows} "
        f"request(s){entities}, reference {arm.reference_rows} row(s)"
    )


def quality_lines(arm: ArmDrift) -> list[str]:
    """An arm's quality section in words, as stdout and the HTML report both say it: its
    figures and label lag, then its notes, the baseline it was judged against and what that
    baseline means for the margins."""
    q = arm.quality
    if q is None:
        return []
    shown = ", ".join(f"{name}={_figure(value)}" for name, value in q.headline())
    lines = [f"quality {arm.arm}: {shown}; {q.label_lag}"]
    return lines + [f"quality {arm.arm}: {note}" for note in q.notes()]


def _figure(value: Any) -> str:
    """A figure as the CLI's tables show it: four significant digits, ``-`` where missing."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def verdict_banner(model: str, arm: ArmDrift, false_alarm_rate: float) -> list[str]:
    """What heads the arm's HTML reports: mlpipe's verdict, its alarms, its quality (with the
    baseline it was judged against) and thresholds, in the words stdout prints."""
    return [
        arm_title(model, arm),
        *(f"alarm {arm.arm}: {alarm}" for alarm in arm.alarms),
        *(
            f"missing share {c.column}: {c.status}; {c.detail}"
            for c in arm.columns
            if c.kind == "missing"
        ),
        *quality_lines(arm),
        thresholds_text(CalibrationStatement(false_alarm_rate=false_alarm_rate)),
        "mlpipe's verdict above decides. Evidently's figures below are for reference: its "
        "column tests use mlpipe's calibrated thresholds and say whether a shift is "
        f"significant; a significant shift alarms when its effect is >= {MIN_EFFECT:g}.",
    ]


def save_snapshot(snapshot: Any, folder: Path, name: str, banner: list[str]) -> tuple[str, str]:
    """Evidently's ``snapshot`` as ``name.html`` (led by ``banner``) and ``name.json``."""
    html, js = folder / f"{name}.html", folder / f"{name}.json"
    write_evidently_html(snapshot, html, banner)
    snapshot.save_json(str(js))
    return str(html), str(js)


def save_reports(
    result: ArmDrift, drift: Any, quality: Any, path: Path, banner: list[str]
) -> ArmDrift:
    """Evidently's ``drift`` report of the arm at ``path`` (``.html``/``.json``, their paths
    set on the result returned) and its ``quality`` report at ``path-quality``, where each
    exists, every page led by ``banner``."""
    if drift is not None:
        html, js = save_snapshot(drift, path.parent, path.name, banner)
        result = replace(result, html=html, json=js)
    if quality is not None:
        save_snapshot(quality, path.parent, f"{path.name}-quality", banner)
    return result


__all__ = ["arm_title", "quality_lines", "save_reports", "save_snapshot", "verdict_banner"]
