"""``monitor drift``: Evidently drift reports over a window of logged traffic, per arm.

For each arm in the window and each version it served: feature drift (window
vs reference, :mod:`._reference`), prediction drift, and quality where outcomes
have arrived (:mod:`._arm_quality`), per the version's task (:mod:`mlpipe.tasks`):
prediction drift compares the binary score, the multiclass predicted class
(categorical) or the regression predicted value with what the same version
predicts on its reference; quality judges the task's metrics against the
registered ones, beside Evidently's classification or regression figures. The
thresholds are calibrated per column (:mod:`._calibration`), each column judged
and the arm's verdict decided in :mod:`._judgement`. One HTML + JSON report per
arm in ``reports/NAME/<timestamp>/`` (:mod:`._drift_report`), a ``summary.json``
with the verdicts (:mod:`._drift_verdict`), and a row per arm in the warehouse's
``reports`` table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.monitoring._arm_quality import arm_quality
from mlpipe.monitoring._arm_window import ArmGroup, ArmWindow, arm_window, version_groups
from mlpipe.monitoring._calibration import FALSE_ALARM_RATE, NullCache, Plan, calibrate
from mlpipe.monitoring._calibration_statement import CalibrationStatement
from mlpipe.monitoring._drift_report import save_reports, verdict_banner
from mlpipe.monitoring._drift_verdict import ArmDrift, DriftVerdict, overall
from mlpipe.monitoring._evidently import drift_tests
from mlpipe.monitoring._judgement import (
    ColumnDrift,
    distance_columns,
    judge_arm,
    missing_share_columns,
    positive_rate_column,
)
from mlpipe.monitoring._quality import version_task
from mlpipe.monitoring._reference import (
    PREDICTION,
    Reference,
    ReferenceSource,
    null_folder,
    served,
)
from mlpipe.monitoring._reports import new_report, pruned_notes, publish, read_logged
from mlpipe.monitoring._screen import Screened, SkippedColumn, missing_columns, screen
from mlpipe.windows import ReferenceSpec, parse_reference, window_ending

if TYPE_CHECKING:
    import pandas as pd

ARMS = ("champion", "canary", "shadow")


@dataclass(frozen=True, kw_only=True)
class _Tested:
    """What testing an arm's columns found, before the verdict."""

    plan: Plan
    columns: list[ColumnDrift]
    skipped: list[SkippedColumn]
    snapshot: object
    notes: tuple[str, ...]


def _test_columns(
    settings: Settings, model: str, version: str, win: ArmWindow, ref: Reference, rate: float
) -> _Tested:
    """Screen, calibrate and test the arm's columns against its reference."""
    screened = _screened(win, ref, settings.monitor.drift_min_rows)
    cache = NullCache(null_folder(settings), model, version, ref.frame)
    gaps = missing_columns(ref.frame, win.features)
    extra = int(ref.positive_rate is not None) + len(gaps)
    plan = calibrate(screened, win.entities, cache, rate, extra)
    share = settings.monitor.drift_share_threshold
    snapshot, tested, failed = drift_tests(screened, share, plan.thresholds)
    judged = distance_columns(tested, plan)
    columns = list(judged.columns)
    if ref.positive_rate is not None:
        columns.append(positive_rate_column(win, ref.positive_rate, len(ref.frame), plan.alpha))
    columns += missing_share_columns(win, ref.frame, gaps, plan.alpha)
    skipped = [*screened.skipped, *failed, *judged.skipped]
    return _Tested(
        plan=plan, columns=columns, skipped=skipped, snapshot=snapshot,
        notes=tuple(screened.notes),
    )  # fmt: skip


def _screened(win: ArmWindow, ref: Reference, min_rows: int) -> Screened:
    current = win.features.reset_index(drop=True).copy()
    current[PREDICTION] = served(win.spec, win.rows)
    columns = sorted((set(ref.frame.columns) | set(current.columns)) - {PREDICTION})
    if PREDICTION in ref.frame.columns:
        columns.append(PREDICTION)
    return screen(ref.frame, current, columns, min_rows)


def _arm_result(
    settings: Settings,
    model: str,
    arm: str,
    win: ArmWindow,
    ref: Reference,
    out_dir: Path,
    rate: float,
    name: str | None = None,
) -> ArmDrift:
    """One arm's window judged against its reference; its reports written as ``name``."""
    min_rows = settings.monitor.drift_min_rows
    untested = ArmDrift(
        arm=arm, version=win.version, verdict="no_data", rows=win.total,
        rows_tested=len(win.rows), sampled=win.sampled, reference_rows=len(ref.frame),
    )  # fmt: skip
    if len(win.rows) < min_rows:
        note = f"{len(win.rows)} request(s) in the window (< {min_rows}): nothing tested"
        return replace(untested, notes=[*ref.notes, note])
    tested = _test_columns(settings, model, untested.version, win, ref, rate)
    judged_quality = arm_quality(settings, model, untested.version, win)
    section = judged_quality.section if judged_quality else None
    judgement = judge_arm(tested.columns, section, settings.monitor.drift_share_threshold)
    result = replace(
        untested, verdict=judgement.verdict, drift_share=judgement.drift_share,
        entities=tested.plan.entities, per_column_alpha=tested.plan.alpha,
        columns=tested.columns, alarms=judgement.alarms, skipped=tested.skipped,
        notes=[*ref.notes, *tested.notes, *judgement.notes], quality=section,
    )  # fmt: skip
    banner = verdict_banner(model, result, rate)
    report = judged_quality.report if judged_quality else None
    return save_reports(result, tested.snapshot, report, out_dir / (name or arm), banner)


def _arm_drift(
    settings: Settings,
    model: str,
    logged: warehouse.PredictionWindow,
    group: ArmGroup,
    reference: ReferenceSource,
    out_dir: Path,
    rate: float,
) -> ArmDrift:
    """One version on one arm of the window against its reference."""
    version = group.version if group.mask.any() else None
    win = arm_window(logged, group, version_task(settings, model, version))
    ref = reference.for_version(settings, model, version, win.spec)
    result = _arm_result(settings, model, group.arm, win, ref, out_dir, rate, group.name)
    notes = [*result.notes, *group.notes]
    if logged.sampled:
        notes.append(f"window sampled in the warehouse: {len(win.rows)} of ~{win.total} rows")
    if len(ref.frame) == 0 and len(win.rows):
        notes.append("the reference is empty: nothing to compare against")
    return replace(result, version=group.version or result.version, notes=notes)


def _check_arguments(arm: str | None, false_alarm_rate: float) -> None:
    if arm is not None and arm not in ARMS:
        raise InvalidInput(f"unknown arm {arm!r}: use champion, canary or shadow")
    if not 0 < false_alarm_rate < 1:
        raise InvalidInput(f"false alarm rate must be between 0 and 1, not {false_alarm_rate}")


def drift(
    settings: Settings,
    model: str,
    window: str = "24h",
    arm: str | None = None,
    reference: str = "training",
    end: datetime | None = None,
    reference_frame: pd.DataFrame | None = None,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
    history: warehouse.HistorySource | None = None,
    false_alarm_rate: float = FALSE_ALARM_RATE,
    version: str | None = None,
) -> DriftVerdict:
    """Drift of ``model``'s traffic in the window ending at ``end`` (default now, naive UTC).

    ``reference`` is ``training`` (the version's reference stored at register
    time, scored by the version for prediction drift), ``window:7d`` or
    ``window:ISO..ISO``; ``reference_frame`` (features, optional ``score`` and
    predicted ``label``) overrides it. Thresholds are calibrated per column so a
    clean window raises an alarm in about ``false_alarm_rate`` of reports (see
    :mod:`._calibration`). ``history`` is what the sync first mirrors into the
    warehouse (see :func:`mlpipe.warehouse.sync`). Writes the reports and their
    index rows; returns the verdict (``exit_code`` 0 ok / insufficient / no
    data, 1 drift or quality). Each version an arm served in the window is
    reported on its own (``version`` keeps one, noting the rows left out).
    Raises :class:`InvalidInput` for a bad
    window/reference/arm/rate and :class:`NotFound` for a model the warehouse
    has never seen.
    """
    current = window_ending(window, end)
    spec = (
        parse_reference(reference, current) if reference_frame is None else ReferenceSpec("frame")
    )
    _check_arguments(arm, false_alarm_rate)
    sample_rows = settings.monitor.drift_sample_rows
    logged = read_logged(
        settings,
        model,
        current,
        sync_first=sync_first,
        history=history,
        notify=notify,
        arm=arm,
        sample_rows=sample_rows,
        with_entities=True,
    )
    report = new_report(settings, "drift", model)
    against = ReferenceSource(spec=spec, frame=reference_frame, sample_rows=sample_rows)
    names = [arm] if arm else sorted(set(logged.rows["arm"])) or ["champion"]
    arms = [
        _arm_drift(settings, model, logged, group, against, report.folder, false_alarm_rate)
        for group in version_groups(logged.rows, names, version)
    ]
    arms = [replace(a, notes=[*a.notes, *pruned_notes(settings, current)]) for a in arms]
    result = DriftVerdict(
        model=model,
        window_start=current.start,
        window_end=current.end,
        reference=against.describe(),
        drift_share_threshold=settings.monitor.drift_share_threshold,
        verdict=overall(arms),
        arms=arms,
        report_dir=str(report.folder),
        calibration=CalibrationStatement(false_alarm_rate=false_alarm_rate),
    )
    publish(settings, report, current, result.to_dict(), [a.finding() for a in arms], notify)
    return result


__all__ = ["ARMS", "drift"]
