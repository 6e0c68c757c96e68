"""``monitor drift``: Evidently drift reports over a window of logged traffic, per arm.

For each arm in the window: feature drift (window vs reference), prediction
drift, and quality where outcomes have arrived, per the version's task
(:mod:`mlpipe.tasks`): prediction drift compares the binary score, the
multiclass predicted class (categorical) or the regression predicted value with
what the same version predicts on its reference; quality judges the task's
metrics against the registered ones, beside Evidently's classification or
regression figures. A feature column with missing values on either side also
gets a test of its own on its missing share (:func:`_add_missing_shares`). One HTML + JSON
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
from mlpipe.errors import InvalidInput, MlpipeError
from mlpipe.monitoring._calibration import (
    CAT_METHOD,
    FALSE_ALARM_RATE,
    MIN_EFFECT,
    MIN_EFFECTIVE_SIZE,
    NUM_METHOD,
    RESAMPLES,
    NullCache,
    Plan,
    calibrate,
    effective_size,
    severity,
)
from mlpipe.monitoring._evidently import ColumnResult, classification_quality, drift_tests
from mlpipe.monitoring._evidently import task_quality as task_quality_report
from mlpipe.monitoring._html import write_evidently_html
from mlpipe.monitoring._quality import (
    alarm_text,
    measured_metrics,
    positive_rate_test,
    quality,
    reference_scores,
    registered_metrics,
    task_quality,
    version_task,
)
from mlpipe.monitoring._registered import baseline_words, label_name
from mlpipe.monitoring._reports import Finding, new_report, pruned_notes, publish, read_logged
from mlpipe.monitoring._screen import Screened, SkippedColumn, missing_columns, screen
from mlpipe.tasks import TaskSpec
from mlpipe.windows import ReferenceSpec, Window, parse_reference, window_ending

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PREDICTION = "prediction"
ARMS = ("champion", "canary", "shadow")
# no_data: nothing in the window to test; insufficient: too few distinct entities to test any
# column; quality: labelled requests show the version doing worse than it was registered with.
DriftOutcome = Literal["ok", "drift", "quality", "insufficient", "no_data"]
EXIT_CODES: dict[DriftOutcome, int] = {
    "ok": 0,
    "no_data": 0,
    "insufficient": 0,
    "drift": 1,
    "quality": 1,
}
_PRECEDENCE: tuple[DriftOutcome, ...] = ("quality", "drift", "ok", "insufficient", "no_data")
ColumnStatus = Literal["ok", "drift", "insufficient"]
ColumnKind = Literal["feature", "prediction", "missing"]
MISSING_METHOD = "missing share, two-proportion z"


@dataclass(frozen=True)
class ColumnDrift:
    """One tested column. ``drifted``: significant *and* at least the stated effect size.

    ``score`` is Evidently's statistic (normed Wasserstein, in reference standard
    deviations, or Jensen-Shannon distance), which is also the effect size;
    ``threshold`` is mlpipe's, calibrated for the column's ``effective_size``.
    """

    column: str
    kind: ColumnKind  # missing: the column's share of missing values, not its values
    method: str
    score: float
    threshold: float | None
    drifted: bool
    status: ColumnStatus = "ok"
    significant: bool = False
    effective_size: float | None = None
    severity: str | None = None
    detail: str = ""


@dataclass
class ArmDrift:
    """One arm's result; ``verdict`` is one of :data:`DriftOutcome`."""

    arm: str
    version: str
    verdict: DriftOutcome
    rows: int  # rows in the window
    rows_tested: int  # after sampling
    sampled: bool
    reference_rows: int
    drift_share: float | None
    entities: int | None = None  # distinct entities among the tested rows
    per_column_alpha: float | None = None
    columns: list[ColumnDrift] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)
    skipped: list[SkippedColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quality: dict[str, Any] | None = None
    html: str | None = None
    json: str | None = None

    @property
    def drifted_features(self) -> list[str]:
        return [c.column for c in self.columns if c.kind == "feature" and c.drifted]

    @property
    def missing_share_drifted(self) -> list[str]:
        """Columns whose share of missing values moved beyond a clean window's."""
        return [c.column for c in self.columns if c.kind == "missing" and c.drifted]

    def finding(self) -> Finding:
        """This arm's row in the ``reports`` index."""
        summary = {
            "drift_share": self.drift_share,
            "drifted": self.drifted_features,
            "missing_share_drifted": self.missing_share_drifted,
            "alarms": self.alarms,
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
    calibration: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for arm, arm_data in zip(self.arms, data["arms"], strict=True):
            arm_data["drifted_features"] = arm.drifted_features
            arm_data["missing_share_drifted"] = arm.missing_share_drifted
        data["exit_code"] = self.exit_code
        return data


def calibration_statement(false_alarm_rate: float) -> dict[str, Any]:
    """How the thresholds were set, for the JSON and the table's footer."""
    return {
        "false_alarm_rate": false_alarm_rate,
        "correction": "Sidak over the tested columns of an arm",
        "methods": {"numerical": NUM_METHOD, "categorical": CAT_METHOD},
        "resamples": RESAMPLES,
        "min_effect": MIN_EFFECT,
        "min_effective_size": MIN_EFFECTIVE_SIZE,
        "null": "windows of the column's effective size (rows / entity design effect) "
        "resampled from the reference; log-normal tail",
    }


def thresholds_text(calibration: dict[str, Any]) -> str:
    """How the thresholds were set, in the words stdout and the HTML report both use."""
    cal = calibration
    return (
        f"thresholds: calibrated per column for {cal['false_alarm_rate']:.0%} false alarms "
        f"per report on clean windows of the same effective size ({cal['correction']}; "
        f"{cal['resamples']} windows resampled from the reference); alarm when significant "
        f"and effect >= {cal['min_effect']:g}; fewer than {cal['min_effective_size']} "
        "distinct entities: insufficient"
    )


def arm_title(model: str, arm: ArmDrift) -> str:
    """One arm's (one version's) verdict line, as stdout and the HTML report both say it."""
    entities = "" if arm.entities is None else f" from {arm.entities} entities"
    return (
        f"{model} {arm.arm} v{arm.version}: {arm.verdict} — {arm.rows_tested} of {arm.rows} "
        f"request(s){entities}, reference {arm.reference_rows} row(s)"
    )


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
        thresholds_text(calibration_statement(false_alarm_rate)),
        "mlpipe's verdict above decides. Evidently's figures below are for reference: its "
        "column tests use mlpipe's calibrated thresholds and say whether a shift is "
        f"significant; a significant shift alarms when its effect is >= {MIN_EFFECT:g}.",
    ]


def _null_folder(settings: Settings) -> Path:
    return settings.state_path / "monitor" / "drift-null"


@dataclass(frozen=True)
class _RefData:
    """An arm's reference: features (+ ``prediction``: scores) and its positive rate."""

    frame: pd.DataFrame
    positive_rate: float | None
    notes: tuple[str, ...] = ()


def _training_reference(settings: Settings, model: str, version: str, spec: TaskSpec) -> _RefData:
    frame = registry.load_reference(settings, model, version).drop(columns="label", errors="ignore")
    try:
        scores = reference_scores(settings, model, version, frame, _null_folder(settings))
    except MlpipeError as exc:
        note = f"prediction drift not tested: the version's reference scores: {exc}"
        return _RefData(frame, None, (note,))
    if spec.task != "binary":  # the version's own predictions: classes, or values
        return _RefData(frame.assign(**{PREDICTION: predicted(spec, scores.scores)}), None)
    return _RefData(frame.assign(**{PREDICTION: scores.scores}), scores.positive_rate)


def predicted(spec: TaskSpec, output: np.ndarray) -> Any:
    """What prediction drift compares for a model output: the binary score, the predicted
    class as text (multiclass: a categorical column) or the predicted value."""
    if spec.task != "multiclass":
        return output
    names = [str(c) for c in spec.classes]
    return [names[i] for i in output.argmax(axis=1)]


def served(spec: TaskSpec, rows: pd.DataFrame) -> Any:
    """:func:`predicted` of logged rows: score, or the class their ``label`` indexes as text."""
    if spec.task != "multiclass":
        return rows["score"].to_numpy(dtype=float)
    names = [str(c) for c in spec.classes]
    return [
        None if v is None or v != v or not 0 <= int(v) < len(names) else names[int(v)]
        for v in rows["label"].tolist()
    ]


def _window_reference(
    settings: Settings, model: str, window: Window, sample_rows: int, spec: TaskSpec
) -> _RefData:
    ref = warehouse.prediction_window(
        settings, model, window.start, window.end, sample_rows=sample_rows, seed=7
    )
    keep = (ref.rows["arm"] != "shadow").to_numpy()
    frame = ref.features[keep].reset_index(drop=True)
    frame[PREDICTION] = served(spec, ref.rows[keep])
    if spec.task != "binary":
        return _RefData(frame, None)
    rate = float(ref.rows["label"][keep].mean()) if keep.any() else None
    return _RefData(frame, rate)


def _given_reference(frame: pd.DataFrame, spec: TaskSpec) -> _RefData:
    """A given frame: scores in ``score`` (its ``label`` the predicted labels) if it has them;
    a multiclass version's predicted classes in ``label``, a regression's values in ``score``."""
    if spec.task == "multiclass":
        if "label" not in frame.columns:
            note = "prediction drift not tested: the given reference has no label column"
            return _RefData(frame.drop(columns="score", errors="ignore"), None, (note,))
        out = frame.drop(columns=["score", "label"], errors="ignore")
        return _RefData(out.assign(**{PREDICTION: frame["label"].astype(str)}), None)
    if "score" not in frame.columns:
        note = "prediction drift not tested: the given reference has no score column"
        return _RefData(frame.drop(columns="label", errors="ignore"), None, (note,))
    rate = float(frame["label"].mean()) if "label" in frame.columns else None
    out = frame.drop(columns="label", errors="ignore").rename(columns={"score": PREDICTION})
    return _RefData(out, rate if spec.task == "binary" else None)


@dataclass
class _Window:
    """One arm's rows in the window: base columns, features, and the entity of each row."""

    rows: pd.DataFrame
    features: pd.DataFrame
    entities: pd.Series | None
    total: int
    sampled: bool
    spec: TaskSpec = field(default_factory=TaskSpec)

    @property
    def version(self) -> str:
        return str(self.rows["version"].mode().iloc[0]) if len(self.rows) else "?"

    def clusters(self) -> np.ndarray:
        import numpy as np

        if self.entities is None:
            return np.arange(len(self.rows))
        return self.entities.astype(str).to_numpy()


def _arm_result(
    settings: Settings,
    model: str,
    arm: str,
    win: _Window,
    ref: _RefData,
    out_dir: Path,
    rate: float,
    name: str | None = None,
) -> ArmDrift:
    min_rows = settings.monitor.drift_min_rows
    result = ArmDrift(
        arm, win.version, "no_data", win.total, len(win.rows), win.sampled, len(ref.frame), None
    )
    result.notes.extend(ref.notes)
    if len(win.rows) < min_rows:
        result.notes.append(
            f"{len(win.rows)} request(s) in the window (< {min_rows}): nothing tested"
        )
        return result
    screened = _screened(win, ref, min_rows)
    result.notes.extend(screened.notes)
    cache = NullCache(_null_folder(settings), model, result.version, ref.frame)
    gaps = missing_columns(ref.frame, win.features)
    extra = int(ref.positive_rate is not None) + len(gaps)
    plan = calibrate(screened, win.entities, cache, rate, extra)
    result.entities, result.per_column_alpha = plan.entities, plan.alpha
    share = settings.monitor.drift_share_threshold
    snapshot, tested, failed = drift_tests(screened, share, plan.thresholds)
    result.skipped = [*screened.skipped, *failed]
    _add_columns(result, tested, plan)
    if ref.positive_rate is not None:
        _add_rate_test(result, win, ref.positive_rate, len(ref.frame), plan)
    _add_missing_shares(result, win, ref.frame, gaps, plan.alpha)
    result.quality = _judge_quality(settings, model, result, win)
    result.verdict = _arm_verdict(result, share)
    banner = verdict_banner(model, result, rate)
    _save_reports(result, snapshot, out_dir, name or arm, banner)
    return result


def _screened(win: _Window, ref: _RefData, min_rows: int) -> Screened:
    current = win.features.reset_index(drop=True).copy()
    current[PREDICTION] = served(win.spec, win.rows)
    columns = sorted((set(ref.frame.columns) | set(current.columns)) - {PREDICTION})
    if PREDICTION in ref.frame.columns:
        columns.append(PREDICTION)
    return screen(ref.frame, current, columns, min_rows)


def _add_columns(result: ArmDrift, tested: dict[str, ColumnResult], plan: Plan) -> None:
    """Evidently's statistic per column, judged against mlpipe's calibrated threshold."""
    for col, (method, score, _evidently_threshold, _failed) in sorted(tested.items()):
        if score != score:  # NaN: the test gave no score
            result.skipped.append(SkippedColumn(col, f"{method} gave no score"))
            continue
        kind: ColumnKind = "prediction" if col == PREDICTION else "feature"
        size = plan.effective.get(col)
        threshold = plan.thresholds.get(col)
        if threshold is None:
            why = plan.insufficient.get(col, "not calibrated")
            result.columns.append(
                ColumnDrift(
                    col, kind, method, score, None, False, "insufficient", False, size, None, why
                )
            )
            continue
        significant = score > threshold
        drifted = significant and score >= MIN_EFFECT
        result.columns.append(
            ColumnDrift(
                col,
                kind,
                method,
                score,
                threshold,
                drifted,
                "drift" if drifted else "ok",
                significant,
                size,
                severity(score) if drifted else None,
            )
        )


def _add_rate_test(
    result: ArmDrift, win: _Window, reference_rate: float, reference_rows: int, plan: Plan
) -> None:
    flagged = win.rows["label"].to_numpy(dtype=float)
    size, distinct = effective_size(win.rows["label"].astype(float), win.entities)
    if min(size, distinct) < MIN_EFFECTIVE_SIZE:
        why = f"{distinct} distinct entities (< {MIN_EFFECTIVE_SIZE}): not tested"
        result.columns.append(
            ColumnDrift(
                "positive_rate",
                "prediction",
                "two-proportion z",
                float("nan"),
                None,
                False,
                "insufficient",
                False,
                size,
                None,
                why,
            )
        )
        return
    design = len(flagged) / max(size, 1.0)
    test = positive_rate_test(flagged, design, reference_rate, reference_rows, plan.alpha)
    detail = (
        f"served {test.window_rate:.2%} vs reference {test.reference_rate:.2%}, "
        f"z={test.z:.2f}, effect h={test.effect:.3f}"
    )
    status: ColumnStatus = "drift" if test.drifted else "ok"
    result.columns.append(
        ColumnDrift(
            "positive_rate",
            "prediction",
            "two-proportion z",
            abs(test.z),
            test.critical,
            test.drifted,
            status,
            test.significant,
            size,
            test.severity,
            detail,
        )
    )


def _add_missing_shares(
    result: ArmDrift, win: _Window, reference: pd.DataFrame, columns: list[str], alpha: float
) -> None:
    """Each column's share of missing values against the reference's: the two-proportion z
    test of the positive rate (window variance inflated by the entities' design effect), at
    the report's per-column ``alpha``, alarming only with an effect (Cohen's h) >= MIN_EFFECT.
    """
    for col in columns:
        gaps = win.features[col].isna().astype(float).reset_index(drop=True)
        size, distinct = effective_size(gaps, win.entities)
        share = float(reference[col].isna().mean())
        if min(size, distinct) < MIN_EFFECTIVE_SIZE:
            why = f"{distinct} distinct entities (< {MIN_EFFECTIVE_SIZE}): not tested"
            result.columns.append(
                ColumnDrift(
                    col, "missing", MISSING_METHOD, float("nan"), None, False, "insufficient",
                    False, size, None, why,
                )
            )  # fmt: skip
            continue
        flagged = gaps.to_numpy()
        test = positive_rate_test(
            flagged, len(flagged) / max(size, 1.0), share, len(reference), alpha
        )
        detail = (
            f"missing {test.window_rate:.1%} vs reference {test.reference_rate:.1%}, "
            f"z={test.z:.2f}, effect h={test.effect:.3f}"
        )
        result.columns.append(
            ColumnDrift(
                col, "missing", MISSING_METHOD, abs(test.z), test.critical, test.drifted,
                "drift" if test.drifted else "ok", test.significant, size, test.severity, detail,
            )
        )  # fmt: skip


def _judge_quality(
    settings: Settings, model: str, result: ArmDrift, win: _Window
) -> dict[str, Any] | None:
    """mlpipe's quality judgement beside Evidently's classification (or regression) figures,
    its report titled with the version's label name, and the baseline it was judged against
    in words (None: no labels)."""
    rows, spec = win.rows, win.spec
    arrived = rows["outcome"].notna()
    if "outcome_label" in rows:
        arrived |= rows["outcome_label"].notna()
    if not arrived.any():
        return None
    widen: frozenset[str] = frozenset()
    tags: dict[str, str] | None = None
    try:
        registered: dict[str, float] | None = registered_metrics(
            settings, model, result.version, spec.task
        )
        widen = measured_metrics(settings, model, result.version)
        tags = registry.show(settings, f"{model}/{result.version}").tags
    except MlpipeError:
        registered = None
    least = settings.monitor.canary_min_labels
    target = label_name(tags)
    if spec.task != "binary":
        figures, labelled = task_quality(rows, win.clusters(), registered, least, spec, widen)
        if labelled is not None:
            figures["evidently"], figures["_snapshot"] = task_quality_report(
                spec, labelled.output, labelled.y, target
            )
    else:
        figures = quality(rows, win.clusters(), registered, least, widen)
        figures["evidently"], figures["_snapshot"] = classification_quality(rows, target)
    if words := baseline_words(tags, figures.get("metrics", [])):
        figures["baseline"] = words
    return figures


QUALITY_FIGURES = {
    "binary": ("auc", "recall", "precision", "log_loss", "labelled_rows", "status"),
    "multiclass": ("accuracy", "macro_f1", "log_loss", "labelled_rows", "status"),
    "regression": ("mae", "rmse", "bias", "labelled_rows", "status"),
}


def quality_lines(arm: ArmDrift) -> list[str]:
    """An arm's quality section in words, as stdout and the HTML report both say it: its
    figures and label lag, then its notes, the baseline it was judged against and what that
    baseline means for the margins."""
    q = arm.quality
    if not q:
        return []
    figures = QUALITY_FIGURES[q.get("task", "binary")]
    shown = ", ".join(f"{k}={_figure(q.get(k))}" for k in figures if k in q)
    lines = [f"quality {arm.arm}: {shown}; {q.get('label_lag', '')}"]
    keys = ("note", "labels_note", "baseline", "baseline_note")
    return lines + [f"quality {arm.arm}: {q[key]}" for key in keys if q.get(key)]


def _figure(value: Any) -> str:
    """A figure as the CLI's tables show it: four significant digits, ``-`` where missing."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _arm_verdict(result: ArmDrift, threshold: float) -> DriftOutcome:
    """Every drifted column is an alarm; so is a share of significant shifts at ``threshold``.

    Sets ``drift_share`` (significant features / features tested) and ``alarms`` on the way.
    """
    tested = [c for c in result.columns if c.status != "insufficient"]
    features = [c for c in tested if c.kind == "feature"]
    if features:
        result.drift_share = sum(c.significant for c in features) / len(features)
    result.alarms = [_alarm(c) for c in tested if c.drifted]
    if result.drift_share is not None and result.drift_share >= threshold:
        result.alarms.append(
            f"drift share {result.drift_share:.2f} >= {threshold:g} (significant shifts)"
        )
    quality_alarms = (result.quality or {}).get("alarms", [])
    result.alarms.extend(alarm_text(m) for m in quality_alarms)
    if quality_alarms:
        return "quality"
    if result.alarms:
        return "drift"
    if tested:
        return "ok"
    if result.columns:
        result.notes.append("every column has too few distinct entities to test")
        return "insufficient"
    result.notes.append("no column could be tested")
    return "no_data"


def _alarm(column: ColumnDrift) -> str:
    if column.kind == "missing":
        return f"{column.column}: {column.severity} shift in missing share ({column.detail})"
    return f"{column.column}: {column.severity} shift"


def _save_reports(
    result: ArmDrift, snapshot: Any, out_dir: Path, name: str, banner: list[str]
) -> None:
    """Evidently's HTML + JSON of the arm's version, as ``name`` (and of its quality, where
    labels arrived), each page led by ``banner``."""
    if snapshot is not None:
        html, js = out_dir / f"{name}.html", out_dir / f"{name}.json"
        write_evidently_html(snapshot, html, banner)
        snapshot.save_json(str(js))
        result.html, result.json = str(html), str(js)
    quality_snapshot = (result.quality or {}).pop("_snapshot", None)
    if quality_snapshot is not None:
        write_evidently_html(quality_snapshot, out_dir / f"{name}-quality.html", banner)
        quality_snapshot.save_json(str(out_dir / f"{name}-quality.json"))


@dataclass(frozen=True, eq=False)
class _Reference:
    """What each arm is compared against: a given frame, a window of traffic, or training."""

    spec: ReferenceSpec
    frame: pd.DataFrame | None
    sample_rows: int

    def describe(self) -> str:
        return self.spec.describe() if self.frame is None else "given frame"

    def for_version(
        self, settings: Settings, model: str, version: str | None, task: TaskSpec
    ) -> _RefData:
        """The reference for an arm (training: of the arm's most frequent ``version``)."""
        import pandas as pd

        if self.frame is not None:
            ref = _given_reference(self.frame, task)
        elif self.spec.kind == "window":
            assert self.spec.window is not None
            ref = _window_reference(settings, model, self.spec.window, self.sample_rows, task)
        elif version is not None:
            ref = _training_reference(settings, model, version, task)
        else:
            ref = _RefData(pd.DataFrame(), None)
        frame = ref.frame
        if len(frame) > self.sample_rows:
            frame = frame.sample(self.sample_rows, random_state=7)
        return _RefData(frame.reset_index(drop=True), ref.positive_rate, ref.notes)


def _arm_drift(
    settings: Settings,
    model: str,
    logged: warehouse.PredictionWindow,
    group: _Group,
    reference: _Reference,
    out_dir: Path,
    rate: float,
) -> ArmDrift:
    """One version on one arm of the window against its reference."""
    mask = group.mask
    entities = None
    if logged.entities is not None and "entity_key" in logged.entities:
        entities = logged.entities["entity_key"][mask].reset_index(drop=True)
    win = _Window(
        logged.rows[mask].reset_index(drop=True),
        logged.features[mask].reset_index(drop=True),
        entities,
        logged.total if mask.all() else int(round(logged.total * mask.mean())),
        logged.sampled,
    )
    version = group.version if mask.any() else None
    win.spec = version_task(settings, model, version)
    ref = reference.for_version(settings, model, version, win.spec)
    result = _arm_result(settings, model, group.arm, win, ref, out_dir, rate, group.name)
    result.version = group.version or result.version
    result.notes.extend(group.notes)
    if logged.sampled:
        result.notes.append(
            f"window sampled in the warehouse: {len(win.rows)} of ~{win.total} rows"
        )
    if len(ref.frame) == 0 and len(win.rows):
        result.notes.append("the reference is empty: nothing to compare against")
    return result


@dataclass(frozen=True, eq=False)
class _Group:
    """The rows of one version on one arm (``mask`` over the window), and its report's name."""

    arm: str
    version: str | None
    mask: np.ndarray
    name: str
    notes: tuple[str, ...] = ()


def _newest_first(rows: pd.DataFrame) -> list[str]:
    """The versions among ``rows``, the one that served last first."""
    last = rows.groupby(rows["version"].astype(str))["ts"].max()
    return [str(v) for v in last.sort_values(ascending=False, kind="stable").index]


def _version_groups(
    rows: pd.DataFrame, arms: list[str], version: str | None = None
) -> list[_Group]:
    """One group per (arm, served version) in the window: a figure never pools two versions.

    ``version`` keeps that version only, with a note per arm of the rows left out.
    An arm that served two versions gets one group (and one report file) per version.
    """
    import numpy as np

    groups: list[_Group] = []
    for arm in arms:
        on_arm = (rows["arm"] == arm).to_numpy()
        versions = _newest_first(rows[on_arm]) if on_arm.any() else []
        notes: tuple[str, ...] = ()
        if version is not None:
            other = int((on_arm & (rows["version"].astype(str) != version).to_numpy()).sum())
            if other:
                notes = (f"{other} row(s) of other versions on the {arm} arm left out",)
            versions = [version] if version in versions else []
        if not versions:
            groups.append(_Group(arm, version, np.zeros(len(rows), bool), arm, notes))
        for v in versions:
            mask = on_arm & (rows["version"].astype(str) == v).to_numpy()
            name = arm if len(versions) == 1 else f"{arm}-v{v}"
            groups.append(_Group(arm, v, mask, name, notes))
    return groups


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
    against = _Reference(spec, reference_frame, sample_rows)
    names = [arm] if arm else sorted(set(logged.rows["arm"])) or ["champion"]
    arms = [
        _arm_drift(settings, model, logged, group, against, report.folder, false_alarm_rate)
        for group in _version_groups(logged.rows, names, version)
    ]
    for arm_drift in arms:
        arm_drift.notes.extend(pruned_notes(settings, current))
    verdicts = {a.verdict for a in arms}
    overall = next(v for v in _PRECEDENCE if v in verdicts or v == "no_data")
    result = DriftVerdict(
        model,
        current.start,
        current.end,
        against.describe(),
        settings.monitor.drift_share_threshold,
        overall,
        arms,
        str(report.folder),
        calibration_statement(false_alarm_rate),
    )
    publish(settings, report, current, result.to_dict(), [a.finding() for a in arms], notify)
    return result
