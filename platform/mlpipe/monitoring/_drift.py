"""``monitor drift``: Evidently drift reports over a window of logged traffic, per arm.

For each arm in the window: feature drift (window vs reference), prediction
drift, and classification quality where outcomes have arrived. One HTML + JSON
report per arm in ``reports/NAME/<timestamp>/``, a ``summary.json`` with the
verdicts, and a row per arm in the warehouse's ``reports`` table.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe import warehouse
from mlpipe.errors import InvalidInput
from mlpipe.monitoring._reports import entry, report_dir, require_logged, write_json
from mlpipe.monitoring._screen import Screened, SkippedColumn, screen
from mlpipe.windows import ReferenceSpec, Window, parse_reference, utcnow, window_ending

if TYPE_CHECKING:
    import pandas as pd

    from mlpipe.config import Settings

PREDICTION = "prediction"
EXIT_CODES = {"ok": 0, "no_data": 0, "drift": 1}


@dataclass(frozen=True)
class ColumnDrift:
    column: str
    kind: str  # "feature" | "prediction"
    method: str
    score: float
    threshold: float
    drifted: bool


@dataclass
class ArmDrift:
    """One arm's result. ``verdict``: ok, drift, or no_data (nothing in the window to test)."""

    arm: str
    version: str
    verdict: str
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


@dataclass
class DriftVerdict:
    """The answer to ``monitor drift``: a verdict per arm and overall, and where the reports are."""

    model: str
    window_start: datetime
    window_end: datetime
    reference: str
    drift_share_threshold: float
    verdict: str  # "ok" | "drift" | "no_data"
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
    from mlpipe import registry  # the registry owns the reference stored at register time

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


def _run_evidently(  # type: ignore[no-untyped-def]
    cur: pd.DataFrame, ref: pd.DataFrame, num: list[str], cat: list[str], drift_share: float = 0.5
):
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    definition = DataDefinition(numerical_columns=num, categorical_columns=cat)
    # mlpipe's drift share, so the report's headline agrees with the CLI's verdict.
    preset = DataDriftPreset(columns=num + cat, drift_share=drift_share)
    report = Report([preset], include_tests=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy/scipy divide warnings on degenerate columns
        import numpy as np

        with np.errstate(all="ignore"):
            return report.run(
                Dataset.from_pandas(cur, data_definition=definition),
                Dataset.from_pandas(ref, data_definition=definition),
            )


def _column_results(snapshot: Any) -> dict[str, tuple[str, float, float, bool]]:
    data = snapshot.dict()
    scores = {}
    for metric in data["metrics"]:
        config = metric.get("config", {})
        if config.get("type") == "evidently:metric_v2:ValueDrift":
            scores[config["column"]] = (
                config.get("method") or "",
                metric.get("value"),
                config.get("threshold"),
            )
    failed = {}
    for test in data["tests"]:
        column = test["metric_config"]["params"].get("column")
        if column is not None:
            failed[column] = str(test["status"]).endswith("FAIL")
    return {
        col: (
            method,
            float(value) if value is not None else float("nan"),
            float(thr or 0),
            failed.get(col, False),
        )
        for col, (method, value, thr) in scores.items()
    }


def _test_columns(
    screened: Screened, drift_share: float = 0.5
) -> tuple[Any, dict[str, tuple[str, float, float, bool]], list[SkippedColumn]]:
    """Evidently on all screened columns; if that fails, column by column, skipping failures."""
    num, cat = screened.numerical, screened.categorical
    if not num and not cat:
        return None, {}, []
    try:
        snapshot = _run_evidently(screened.current, screened.reference, num, cat, drift_share)
        return snapshot, _column_results(snapshot), []
    except Exception:  # noqa: BLE001 - find the column Evidently cannot take, test the rest
        pass
    results: dict[str, tuple[str, float, float, bool]] = {}
    skipped: list[SkippedColumn] = []
    good_num, good_cat = [], []
    for col in num + cat:
        is_num = col in num
        try:
            snap = _run_evidently(
                screened.current[[col]],
                screened.reference[[col]],
                [col] if is_num else [],
                [] if is_num else [col],
            )
            results.update(_column_results(snap))
            (good_num if is_num else good_cat).append(col)
        except Exception as exc:  # noqa: BLE001 - reported as a skipped column with the reason
            skipped.append(
                SkippedColumn(
                    col, f"Evidently could not test it: {type(exc).__name__}: {exc}"[:200]
                )
            )
    snapshot = (
        _run_evidently(screened.current, screened.reference, good_num, good_cat, drift_share)
        if good_num or good_cat
        else None
    )
    return snapshot, results, skipped


def _quality(rows: pd.DataFrame) -> tuple[dict[str, Any] | None, Any]:
    """Classification quality on the rows whose outcome has arrived (Evidently report + figures)."""
    labelled = rows[rows["outcome"].notna()]
    if labelled.empty:
        return None, None
    from evidently import BinaryClassification, DataDefinition, Dataset, Report
    from evidently.metrics import Accuracy, F1Score, Precision, Recall

    frame = labelled.assign(
        target=labelled["outcome"].round().astype(int), prediction=labelled["label"].astype(int)
    )[["target", "prediction"]]
    definition = DataDefinition(
        classification=[BinaryClassification(target="target", prediction_labels="prediction")],
        categorical_columns=["target", "prediction"],
    )
    report = Report([Accuracy(), Precision(), Recall(), F1Score()])
    figures: dict[str, Any] = {"labelled_rows": int(len(frame))}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            snapshot = report.run(Dataset.from_pandas(frame, data_definition=definition), None)
    except Exception as exc:  # noqa: BLE001 - quality is extra; the drift verdict stands without it
        figures["error"] = f"{type(exc).__name__}: {exc}"[:200]
        return figures, None
    for metric in snapshot.dict()["metrics"]:
        name = metric["metric_name"].split("(")[0].lower()
        value = metric.get("value")
        figures[name] = value if isinstance(value, int | float) else None
    return figures, snapshot


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
    snapshot, columns, failed = _test_columns(screened, threshold)
    result.skipped = [*screened.skipped, *failed]
    for col, (method, score, thr, drifted) in sorted(columns.items()):
        if score != score:  # NaN: the test gave no score
            result.skipped.append(SkippedColumn(col, f"{method} gave no score"))
            continue
        kind = "prediction" if col == PREDICTION else "feature"
        result.columns.append(ColumnDrift(col, kind, method, score, thr, drifted))
    tested = [c for c in result.columns if c.kind == "feature"]
    if tested:
        result.drift_share = sum(c.drifted for c in tested) / len(tested)
    prediction_drift = any(c.drifted for c in result.columns if c.kind == "prediction")
    if not result.columns:
        result.notes.append("no column could be tested")
        result.verdict = "no_data"
    elif prediction_drift or (result.drift_share is not None and result.drift_share >= threshold):
        result.verdict = "drift"
    else:
        result.verdict = "ok"
    quality, quality_snapshot = _quality(rows)
    result.quality = quality
    if snapshot is not None:
        html, js = out_dir / f"{arm}.html", out_dir / f"{arm}.json"
        snapshot.save_html(str(html))
        snapshot.save_json(str(js))
        result.html, result.json = str(html), str(js)
    if quality_snapshot is not None:
        quality_snapshot.save_html(str(out_dir / f"{arm}-quality.html"))
        quality_snapshot.save_json(str(out_dir / f"{arm}-quality.json"))
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
) -> DriftVerdict:
    """Drift of ``model``'s traffic in the window ending at ``end`` (default now, naive UTC).

    ``reference`` is ``training`` (the version's reference stored at register
    time), ``window:7d`` or ``window:ISO..ISO``; ``reference_frame`` (features +
    ``label``) overrides it. Writes the reports and their index rows; returns the
    verdict (``exit_code`` 0 ok or no data, 1 drift). Raises :class:`InvalidInput`
    for a bad window/reference/arm and :class:`NotFound` for a model the
    warehouse has never seen.
    """
    current = window_ending(window, end)
    spec = (
        parse_reference(reference, current) if reference_frame is None else ReferenceSpec("frame")
    )
    if arm is not None and arm not in ("champion", "canary", "shadow"):
        raise InvalidInput(f"unknown arm {arm!r}: use champion, canary or shadow")
    require_logged(settings, model, sync_first, notify)
    sample_rows = settings.monitor.drift_sample_rows
    win = warehouse.prediction_window(
        settings, model, current.start, current.end, arm=arm, sample_rows=sample_rows, notify=notify
    )
    now = utcnow()
    out_dir = report_dir(settings, model, now)
    arms: list[ArmDrift] = []
    names = [arm] if arm else sorted(set(win.rows["arm"])) or ["champion"]
    for name in names:
        mask = (win.rows["arm"] == name).to_numpy()
        rows = win.rows[mask].reset_index(drop=True)
        feats = win.features[mask].reset_index(drop=True)
        total = win.total if arm or len(names) == 1 else int(round(win.total * mask.mean()))
        if reference_frame is not None:
            ref = reference_frame.rename(columns={"label": PREDICTION})
        elif spec.kind == "window":
            assert spec.window is not None
            ref = _window_reference(settings, model, spec.window, sample_rows)
        elif len(rows):
            ref = _training_reference(settings, model, str(rows["version"].mode().iloc[0]))
        else:
            ref = rows.iloc[:0]
        if len(ref) > sample_rows:
            ref = ref.sample(sample_rows, random_state=7)
        ref = ref.reset_index(drop=True)
        result = _arm_result(settings, name, rows, feats, total, win.sampled, ref, out_dir)
        if win.sampled:
            result.notes.append(f"window sampled in the warehouse: {len(rows)} of ~{total} rows")
        if len(ref) == 0 and len(rows):
            result.notes.append("the reference is empty: nothing to compare against")
        arms.append(result)
    verdicts = {a.verdict for a in arms}
    overall = "drift" if "drift" in verdicts else ("ok" if "ok" in verdicts else "no_data")
    verdict = DriftVerdict(
        model,
        current.start,
        current.end,
        spec.describe() if reference_frame is None else "given frame",
        settings.monitor.drift_share_threshold,
        overall,
        arms,
        str(out_dir),
    )
    write_json(out_dir / "summary.json", verdict.to_dict())
    summaries = [
        {
            "drift_share": a.drift_share,
            "drifted": a.drifted_features,
            "skipped": [asdict(s) for s in a.skipped],
            "rows": a.rows,
        }
        for a in arms
    ]
    entries = [
        entry("drift", model, current, now, a.verdict, out_dir, s, arm=a.arm, version=a.version)
        for a, s in zip(arms, summaries, strict=True)
    ]
    warehouse.record_reports(settings, entries, notify)
    return verdict
