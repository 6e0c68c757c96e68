"""``monitor drift``: Evidently drift reports over a window of logged traffic, per arm.

For each arm in the window: feature drift (window vs reference), prediction
drift, and classification quality where outcomes have arrived. One HTML + JSON
report per arm in ``reports/NAME/<timestamp>/``, a ``summary.json`` with the
verdicts, and a row per arm in the warehouse's ``reports`` table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mlpipe import registry, warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.monitoring._evidently import classification_quality, drift_tests
from mlpipe.monitoring._reports import Finding, new_report, publish, read_logged
from mlpipe.monitoring._screen import SkippedColumn, screen
from mlpipe.windows import ReferenceSpec, Window, parse_reference, window_ending

if TYPE_CHECKING:
    import pandas as pd

PREDICTION = "prediction"
ARMS = ("champion", "canary", "shadow")
DriftOutcome = Literal["ok", "drift", "no_data"]  # no_data: nothing in the window to test
EXIT_CODES: dict[DriftOutcome, int] = {"ok": 0, "no_data": 0, "drift": 1}


@dataclass(frozen=True)
class ColumnDrift:
    column: str
    kind: Literal["feature", "prediction"]
    method: str
    score: float
    threshold: float
    drifted: bool


@dataclass
class ArmDrift:
    """One arm's result. ``verdict``: ok, drift, or no_data (nothing in the window to test)."""

    arm: str
    version: str
    verdict: DriftOutcome
    rows: int  # rows in the window
    rows_tested: int  # after sampling
    sampled: bool
    reference_rows: int
    drift_share: float | None
    columns: list[ColumnDrift] = field(default_factory=list)
    skipped: list[SkippedColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quality: dict[str, Any] | None = None
    html: str | None = None
    json: str | None = None

    @property
    def drifted_features(self) -> list[str]:
        return [c.column for c in self.columns if c.kind == "feature" and c.drifted]

    def finding(self) -> Finding:
        """This arm's row in the ``reports`` index."""
        summary = {
            "drift_share": self.drift_share,
            "drifted": self.drifted_features,
            "skipped": [asdict(s) for s in self.skipped],
            "rows": self.rows,
        }
        return Finding(self.verdict, summary, arm=self.arm, version=self.version)


@dataclass
class DriftVerdict:
    """The answer to ``monitor drift``: a verdict per arm and overall, and where the reports are."""

    model: str
    window_start: datetime
    window_end: datetime
    reference: str
    drift_share_threshold: float
    verdict: DriftOutcome
    arms: list[ArmDrift]
    report_dir: str | None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for arm, arm_data in zip(self.arms, data["arms"], strict=True):
            arm_data["drifted_features"] = arm.drifted_features
        data["exit_code"] = self.exit_code
        return data


def _training_reference(settings: Settings, model: str, version: str) -> pd.DataFrame:
    frame = registry.load_reference(settings, model, version)
    return frame.rename(columns={"label": PREDICTION})


def _window_reference(
    settings: Settings, model: str, window: Window, sample_rows: int
) -> pd.DataFrame:
    ref = warehouse.prediction_window(
        settings, model, window.start, window.end, sample_rows=sample_rows, seed=7
    )
    keep = (ref.rows["arm"] != "shadow").to_numpy()
    frame = ref.features[keep].reset_index(drop=True)
    frame[PREDICTION] = ref.rows["label"][keep].to_numpy()
    return frame


def _arm_result(
    settings: Settings,
    arm: str,
    rows: pd.DataFrame,
    features: pd.DataFrame,
    total: int,
    sampled: bool,
    reference: pd.DataFrame,
    out_dir: Path,
) -> ArmDrift:
    version = rows["version"].mode().iloc[0] if len(rows) else "?"
    threshold = settings.monitor.drift_share_threshold
    min_values = settings.monitor.drift_min_rows
    result = ArmDrift(arm, str(version), "no_data", total, len(rows), sampled, len(reference), None)
    if len(rows) < min_values:
        result.notes.append(
            f"{len(rows)} request(s) in the window (< {min_values}): nothing tested"
        )
        return result
    current = features.reset_index(drop=True).copy()
    current[PREDICTION] = rows["label"].to_numpy()
    feature_cols = sorted((set(reference.columns) | set(current.columns)) - {PREDICTION})
    screened = screen(reference, current, [*feature_cols, PREDICTION], min_values)
    result.notes.extend(screened.notes)
    snapshot, columns, failed = drift_tests(screened, threshold)
    result.skipped = [*screened.skipped, *failed]
    for col, (method, score, thr, drifted) in sorted(columns.items()):
        if score != score:  # NaN: the test gave no score
            result.skipped.append(SkippedColumn(col, f"{method} gave no score"))
            continue
        kind: Literal["feature", "prediction"] = "prediction" if col == PREDICTION else "feature"
        result.columns.append(ColumnDrift(col, kind, method, score, thr, drifted))
    result.verdict = _arm_verdict(result, threshold)
    figures, quality_snapshot = classification_quality(rows)
    result.quality = figures
    _save_reports(result, snapshot, quality_snapshot, out_dir)
    return result


def _arm_verdict(result: ArmDrift, threshold: float) -> DriftOutcome:
    """Drift when the prediction drifts or the share of drifted features reaches ``threshold``.

    Sets ``drift_share`` on the way (None when no feature could be tested).
    """
    tested = [c for c in result.columns if c.kind == "feature"]
    if tested:
        result.drift_share = sum(c.drifted for c in tested) / len(tested)
    prediction_drift = any(c.drifted for c in result.columns if c.kind == "prediction")
    if not result.columns:
        result.notes.append("no column could be tested")
        return "no_data"
    if prediction_drift or (result.drift_share is not None and result.drift_share >= threshold):
        return "drift"
    return "ok"


def _save_reports(result: ArmDrift, snapshot: Any, quality_snapshot: Any, out_dir: Path) -> None:
    """Evidently's HTML + JSON of the arm (and of its quality, where labels arrived)."""
    if snapshot is not None:
        html, js = out_dir / f"{result.arm}.html", out_dir / f"{result.arm}.json"
        snapshot.save_html(str(html))
        snapshot.save_json(str(js))
        result.html, result.json = str(html), str(js)
    if quality_snapshot is not None:
        quality_snapshot.save_html(str(out_dir / f"{result.arm}-quality.html"))
        quality_snapshot.save_json(str(out_dir / f"{result.arm}-quality.json"))


@dataclass(frozen=True, eq=False)
class _Reference:
    """What each arm is compared against: a given frame, a window of traffic, or training."""

    spec: ReferenceSpec
    frame: pd.DataFrame | None
    sample_rows: int

    def describe(self) -> str:
        return self.spec.describe() if self.frame is None else "given frame"

    def for_rows(self, settings: Settings, model: str, rows: pd.DataFrame) -> pd.DataFrame:
        """The reference for an arm's ``rows`` (training: of the arm's most frequent version)."""
        if self.frame is not None:
            ref = self.frame.rename(columns={"label": PREDICTION})
        elif self.spec.kind == "window":
            assert self.spec.window is not None
            ref = _window_reference(settings, model, self.spec.window, self.sample_rows)
        elif len(rows):
            ref = _training_reference(settings, model, str(rows["version"].mode().iloc[0]))
        else:
            ref = rows.iloc[:0]
        if len(ref) > self.sample_rows:
            ref = ref.sample(self.sample_rows, random_state=7)
        return ref.reset_index(drop=True)


def _arm_drift(
    settings: Settings,
    model: str,
    logged: warehouse.PredictionWindow,
    arm: str,
    whole: bool,
    reference: _Reference,
    out_dir: Path,
) -> ArmDrift:
    """One arm of the window against its reference; ``whole``: the window holds this arm only."""
    mask = (logged.rows["arm"] == arm).to_numpy()
    rows = logged.rows[mask].reset_index(drop=True)
    feats = logged.features[mask].reset_index(drop=True)
    total = logged.total if whole else int(round(logged.total * mask.mean()))
    ref = reference.for_rows(settings, model, rows)
    result = _arm_result(settings, arm, rows, feats, total, logged.sampled, ref, out_dir)
    if logged.sampled:
        result.notes.append(f"window sampled in the warehouse: {len(rows)} of ~{total} rows")
    if len(ref) == 0 and len(rows):
        result.notes.append("the reference is empty: nothing to compare against")
    return result


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
) -> DriftVerdict:
    """Drift of ``model``'s traffic in the window ending at ``end`` (default now, naive UTC).

    ``reference`` is ``training`` (the version's reference stored at register
    time), ``window:7d`` or ``window:ISO..ISO``; ``reference_frame`` (features +
    ``label``) overrides it. ``history`` is what the sync first mirrors into the
    warehouse (see :func:`mlpipe.warehouse.sync`). Writes the reports and their
    index rows; returns the verdict (``exit_code`` 0 ok or no data, 1 drift).
    Raises :class:`InvalidInput` for a bad window/reference/arm and
    :class:`NotFound` for a model the warehouse has never seen.
    """
    current = window_ending(window, end)
    spec = (
        parse_reference(reference, current) if reference_frame is None else ReferenceSpec("frame")
    )
    if arm is not None and arm not in ARMS:
        raise InvalidInput(f"unknown arm {arm!r}: use champion, canary or shadow")
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
    )
    report = new_report(settings, "drift", model)
    against = _Reference(spec, reference_frame, sample_rows)
    names = [arm] if arm else sorted(set(logged.rows["arm"])) or ["champion"]
    whole = arm is not None or len(names) == 1
    arms = [_arm_drift(settings, model, logged, n, whole, against, report.folder) for n in names]
    verdicts = {a.verdict for a in arms}
    overall: DriftOutcome = (
        "drift" if "drift" in verdicts else ("ok" if "ok" in verdicts else "no_data")
    )
    result = DriftVerdict(
        model,
        current.start,
        current.end,
        against.describe(),
        settings.monitor.drift_share_threshold,
        overall,
        arms,
        str(report.folder),
    )
    publish(settings, report, current, result.to_dict(), [a.finding() for a in arms], notify)
    return result
