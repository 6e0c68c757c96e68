"""Running Evidently: drift tests over screened columns, and classification or regression
quality (binary: its label metrics; multiclass: ClassificationPreset; regression:
RegressionPreset).

Evidently is asked once for every column; when it cannot take one, each column
is run alone to find the ones it cannot test, which are reported as skipped
with Evidently's reason, and the rest are tested together.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from mlpipe.monitoring._calibration import CAT_METHOD, NUM_METHOD
from mlpipe.monitoring._screen import Screened, SkippedColumn
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# Per tested column: (method, score, threshold, drifted).
ColumnResult = tuple[str, float, float, bool]


def _run_evidently(
    cur: pd.DataFrame,
    ref: pd.DataFrame,
    num: list[str],
    cat: list[str],
    drift_share: float = 0.5,
    thresholds: dict[str, float] | None = None,
) -> Any:
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    definition = DataDefinition(numerical_columns=num, categorical_columns=cat)
    # mlpipe's drift share and calibrated thresholds, so the report agrees with the CLI's
    # verdict; the methods are pinned (Evidently would switch them on the reference's size)
    # because the thresholds are calibrated for these statistics.
    preset = DataDriftPreset(
        columns=num + cat,
        drift_share=drift_share,
        num_method=NUM_METHOD,
        cat_method=CAT_METHOD,
        per_column_threshold={c: t for c, t in (thresholds or {}).items() if c in num + cat},
    )
    report = Report([preset], include_tests=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy/scipy divide warnings on degenerate columns
        import numpy as np

        with np.errstate(all="ignore"):
            return report.run(
                Dataset.from_pandas(cur, data_definition=definition),
                Dataset.from_pandas(ref, data_definition=definition),
            )


def _column_results(snapshot: Any) -> dict[str, ColumnResult]:
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


def drift_tests(
    screened: Screened, drift_share: float = 0.5, thresholds: dict[str, float] | None = None
) -> tuple[Any, dict[str, ColumnResult], list[SkippedColumn]]:
    """Evidently on all screened columns; if that fails, column by column, skipping failures.

    ``thresholds``: per column, mlpipe's calibrated threshold (Evidently's default elsewhere).
    """
    num, cat = screened.numerical, screened.categorical
    if not num and not cat:
        return None, {}, []
    try:
        snapshot = _run_evidently(
            screened.current, screened.reference, num, cat, drift_share, thresholds
        )
        return snapshot, _column_results(snapshot), []
    except Exception:  # noqa: BLE001 - find the column Evidently cannot take, test the rest
        pass
    results: dict[str, ColumnResult] = {}
    skipped: list[SkippedColumn] = []
    good_num: list[str] = []
    good_cat: list[str] = []
    for col in num + cat:
        is_num = col in num
        try:
            snap = _run_evidently(
                screened.current[[col]],
                screened.reference[[col]],
                [col] if is_num else [],
                [] if is_num else [col],
                thresholds=thresholds,
            )
            results.update(_column_results(snap))
            (good_num if is_num else good_cat).append(col)
        except Exception as exc:  # noqa: BLE001 - reported as a skipped column with the reason
            skipped.append(
                SkippedColumn(
                    column=col,
                    reason=f"Evidently could not test it: {type(exc).__name__}: {exc}"[:200],
                )
            )
    snapshot = (
        _run_evidently(
            screened.current, screened.reference, good_num, good_cat, drift_share, thresholds
        )
        if good_num or good_cat
        else None
    )
    return snapshot, results, skipped


def target_column(label: str, taken: list[str]) -> str:
    """The outcome column of a quality report, named after the version's ``label`` (which
    titles Evidently's page) unless another column of the report already has that name."""
    return label if label not in taken else f"{label} (outcome)"


def classification_quality(
    rows: pd.DataFrame, label: str = "outcome"
) -> tuple[dict[str, Any] | None, Any]:
    """Classification quality on the rows whose outcome has arrived (Evidently report + figures),
    the outcome column named ``label``."""
    labelled = rows[rows["outcome"].notna()]
    if labelled.empty:
        return None, None
    import pandas as pd
    from evidently import BinaryClassification, DataDefinition, Report
    from evidently.metrics import Accuracy, F1Score, Precision, Recall

    target = target_column(label, ["prediction"])
    frame = pd.DataFrame(
        {
            target: labelled["outcome"].round().astype(int).to_numpy(),
            "prediction": labelled["label"].astype(int).to_numpy(),
        }
    )
    definition = DataDefinition(
        classification=[BinaryClassification(target=target, prediction_labels="prediction")],
        categorical_columns=[target, "prediction"],
    )
    report = Report([Accuracy(), Precision(), Recall(), F1Score()])
    return _figures_of(report, frame, definition)


def task_quality(
    spec: TaskSpec, output: np.ndarray, y: np.ndarray, label: str = "outcome"
) -> tuple[dict[str, Any] | None, Any]:
    """Evidently's ClassificationPreset (multiclass: ``output`` the ``[n, K]`` probabilities,
    ``y`` class indices) or RegressionPreset (``output`` the predictions, ``y`` the outcomes)
    on labelled rows, the outcome column named ``label`` (the page's title says
    ``Target: 'label'``): its figures and its report (None where there are no rows)."""
    if not len(y):
        return None, None
    import pandas as pd
    from evidently import DataDefinition, MulticlassClassification, Regression, Report
    from evidently.presets import ClassificationPreset, RegressionPreset

    if spec.task == "multiclass":
        names = [str(c) for c in spec.classes]
        target = target_column(label, [*names, "prediction"])
        frame = pd.DataFrame(output, columns=names)
        frame[target] = [names[int(i)] for i in y]
        frame["prediction"] = [names[i] for i in output.argmax(axis=1)]
        definition = DataDefinition(
            classification=[
                MulticlassClassification(
                    target=target, prediction_labels="prediction", prediction_probas=names
                )
            ],
            categorical_columns=[target, "prediction"],
        )
        report = Report([ClassificationPreset()])
    else:
        target = target_column(label, ["prediction"])
        frame = pd.DataFrame({target: y, "prediction": output})
        definition = DataDefinition(
            regression=[Regression(target=target, prediction="prediction")],
            numerical_columns=[target, "prediction"],
        )
        report = Report([RegressionPreset()])
    return _figures_of(report, frame, definition)


def _figures_of(report: Any, frame: pd.DataFrame, definition: Any) -> tuple[dict[str, Any], Any]:
    """Run ``report`` on ``frame``: one figure per metric (a distribution's mean), the snapshot."""
    from evidently import Dataset

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
        if isinstance(value, dict) and "mean" in value:
            value = value["mean"]
        if isinstance(value, int | float):
            figures[name] = value
    return figures, snapshot
