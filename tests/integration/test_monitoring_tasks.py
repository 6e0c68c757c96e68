"""Monitoring of multiclass and regression versions: real registry, warehouse and CLI.

An iris-like classifier (3 classes named by text) and a house-price regressor
are registered (real MLflow) once per module: two equally good versions of each,
and a broken one (trained on shuffled classes; fitted to prices 2 higher).
Traffic is logged the way the gateway logs it (score, label and probabilities as
the version's task says), synced into the warehouse, and outcomes loaded from a
CSV whose labels are the class names (``setosa``) or the prices.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import monitoring, registry, warehouse
from mlpipe.predlog import ENCODER, PredictionRecord
from tests.integration.test_monitoring_verdict_page import CHROMIUM, rendered_layout

pytestmark = pytest.mark.integration
IRIS = ["petal_length", "petal_width"]
HOUSE = ["rooms", "age"]
SPECIES = np.array(["setosa", "versicolor", "virginica"])


def _iris(rows: int, seed: int, shift: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(shift, 1.0, (rows, 2))
    logits = np.c_[x[:, 0], x[:, 1], -x[:, 0] - x[:, 1]] + rng.normal(0, 0.5, (rows, 3))
    return pd.DataFrame({IRIS[0]: x[:, 0], IRIS[1]: x[:, 1], "label": SPECIES[logits.argmax(1)]})


def _house(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"rooms": rng.normal(5, 1, rows), "age": rng.normal(20, 5, rows)})
    return frame.assign(label=30 * frame["rooms"] - frame["age"] + rng.normal(0, 5, rows))


def _register(settings: Any, root: Path, name: str, frame: pd.DataFrame, model: Any) -> str:
    import joblib

    inputs = [c for c in frame.columns if c != "label"]
    model.fit(frame[inputs].to_numpy(), frame["label"].to_numpy())
    model_path, data_path = root / f"{name}-{time.time_ns()}.joblib", root / f"{name}.parquet"
    joblib.dump(model, model_path)
    frame.to_parquet(data_path, index=False)
    scored = model.predict(frame[inputs].to_numpy())
    metrics = (
        {"accuracy": float(np.mean(scored == frame["label"]))}
        if name == "iris"
        else {"mae": float(np.mean(np.abs(scored - frame["label"])))}
    )
    info = registry.register(
        settings, name, dataset=data_path, model_path=model_path, metrics=metrics
    )
    return info.version


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """iris v1, v2 (good), v3 (shuffled classes); house v1, v2 (good), v3 (prices + 2)."""
    from sklearn.linear_model import LogisticRegression, Ridge

    from mlpipe.config import Settings

    root = tmp_path_factory.mktemp("tasks")
    settings = Settings(home=root)
    iris = _iris(900, 0)
    shuffled = iris.assign(label=np.random.default_rng(1).permutation(iris["label"].to_numpy()))
    for frame in (iris, _iris(900, 1), shuffled):
        _register(settings, root, "iris", frame, LogisticRegression())
    house = _house(900, 0)
    for frame in (house, _house(900, 1), house.assign(label=house["label"] + 2)):
        _register(settings, root, "house", frame, Ridge())
    return root


@pytest.fixture
def stack(home: Path, template: Path, settings: Any) -> Any:
    shutil.copytree(template / ".mlpipe", home / ".mlpipe")
    return settings


def _traffic(
    settings: Any,
    model: str,
    arms: dict[str, str],
    frame: pd.DataFrame,
    prefix: str = "r",
    labels: pd.Series | None = None,
) -> list[PredictionRecord]:
    """Log ``frame``'s rows, 300 customers split by parity over ``arms``; load their outcomes
    (``labels``, default the frame's)."""
    inputs = [c for c in frame.columns if c != "label"]
    customers = np.random.default_rng(len(frame)).integers(0, 300, len(frame))
    x = frame[inputs].to_numpy(dtype=float)
    answers = {v: _predictions(settings, model, v, x) for v in set(arms.values())}
    now, records = time.time() - 5, []
    for i, customer in enumerate(customers):
        arm = "canary" if customer % 2 else "champion"
        p = answers[arms[arm]][i]
        records.append(
            PredictionRecord(
                request_id=f"{prefix}-{i}", ts=now - i * 0.01, tenant="t", model=model,
                version=arms[arm], arm=arm, generation=1,  # type: ignore[arg-type]
                entity_key=f"customer_id={customer}", entity={"customer_id": int(customer)},
                features=dict(zip(inputs, x[i].tolist(), strict=True)), score=p.score,
                label=p.label, latency_ms=4.0,
                probabilities=None if p.probabilities is None else list(p.probabilities),
            )
        )  # fmt: skip
    _log(settings, records, prefix, frame["label"] if labels is None else labels)
    return records


def _predictions(settings: Any, model: str, version: str, x: np.ndarray) -> list[Any]:
    """The version's Prediction of each row of ``x``, as the gateway makes them."""
    loaded = registry.load_verified(settings, model, version)
    return loaded.task.predictions(loaded.task.check_output(loaded.predict_scores(x), len(x)))


def _log(settings: Any, records: list[PredictionRecord], prefix: str, labels: Any) -> None:
    log = settings.predlog_path / f"traffic-{prefix}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    if not len(labels):
        return
    path = settings.home / f"labels-{prefix}.csv"
    ids = [r.request_id for r in records]
    pd.DataFrame({"request_id": ids, "label": list(labels)}).to_csv(path, index=False)
    warehouse.load_outcomes(settings, path)


def _checks(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


@pytest.mark.parametrize("rows", [600, 2400])
def test_a_clean_multiclass_canary_passes_and_a_shuffled_one_fails(stack: Any, rows: int) -> None:
    _traffic(stack, "iris", {"champion": "1", "canary": "2"}, _iris(rows, 10), "clean")
    clean = monitoring.analyze(stack, "iris", "1h")
    assert clean.verdict == "pass", [c for c in clean.checks if c.passed is False]
    assert clean.paired and clean.task == "multiclass (3 classes)"
    assert {"paired_classes", "accuracy", "macro_f1", "log_loss"} <= set(_checks(clean))
    _traffic(stack, "iris", {"champion": "1", "canary": "3"}, _iris(rows, 11), "blind")
    blind = monitoring.analyze(stack, "iris", "1h", version="3")
    failed = {c.name for c in blind.checks if c.passed is False}
    assert blind.verdict == "fail" and {"paired_classes", "accuracy"} <= failed


def test_canary_analyze_through_the_cli_shows_the_tasks_metrics(
    stack: Any, cli_in_process: Any, tmp_path: Path
) -> None:
    frame = _iris(1200, 12)
    labels = frame["label"].where(np.arange(len(frame)) % 40 != 0, "rose")  # 30 name no class
    records = _traffic(stack, "iris", {"champion": "1", "canary": "2"}, frame, "cli", labels)
    result = cli_in_process("canary", "analyze", "iris")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "multiclass (3 classes)" in result.stdout and "macro_f1" in result.stdout
    assert "verdict: pass (both versions on the same rows)" in result.stdout
    assert "per class, each arm's own rows" in result.stdout
    assert "champion (rows) vs canary (columns)" in result.stdout
    data = json.loads(cli_in_process("canary", "analyze", "iris", "--json").stdout)
    accuracy = next(c for c in data["checks"] if c["name"] == "accuracy")
    assert "30 outcome label(s) name no class of the version: left out" in accuracy["detail"]
    _assert_canary_class_tables(stack, data, records, labels)
    page = Path(data["html_path"])
    text = page.read_text()
    assert "<h1>iris: canary v2 vs champion v1: pass</h1>" in text and "shadow" not in text
    assert "<th>canary_recall</th>" in text and "<td>versicolor</td>" in text
    if CHROMIUM is not None:  # every table fits a 1280 px page: none scrolls, none runs off
        layout = rendered_layout(page, tmp_path / "layout")
        assert layout["page"] <= layout["view"], layout
        assert all(scroll <= shown + 1 for scroll, shown in layout["tables"]), layout


def _assert_canary_class_tables(
    settings: Any, data: dict[str, Any], records: list[PredictionRecord], labels: pd.Series
) -> None:
    """Issue 28 item 6: each arm's classes on its own rows (share of its predictions, recall
    and precision from what it served, labels naming no class left out), and both versions'
    agreement, confusion and probability deltas on the same re-scored rows, by class name."""
    names = list(SPECIES)
    arm = np.array([r.arm for r in records])
    served = np.array([r.label for r in records])
    truth = np.array([names.index(v) if v in names else -1 for v in labels])
    per_class = {r["class"]: r for r in data["arm_classes"]}
    assert list(per_class) == names
    for k, name in enumerate(names):
        for side in ("champion", "canary"):
            mine, pred = truth[arm == side], served[arm == side]
            row = per_class[name]
            assert row[f"{side}_share"] == pytest.approx(np.mean(pred == k))
            assert row[f"{side}_labelled"] == (mine == k).sum()
            assert row[f"{side}_recall"] == pytest.approx(np.mean(pred[mine == k] == k))
            precise = mine[(pred == k) & (mine >= 0)] == k
            assert row[f"{side}_precision"] == pytest.approx(np.mean(precise))
    # both versions re-scored every analysed row (the champion arm's, then the canary arm's)
    order = np.r_[np.flatnonzero(arm == "champion"), np.flatnonzero(arm == "canary")]
    x = np.array([[records[i].features[f] for f in IRIS] for i in order])
    v1, v2 = (
        np.array([list(p.probabilities) for p in _predictions(settings, "iris", v, x)])
        for v in ("1", "2")
    )
    confusion = pd.crosstab(
        pd.Categorical(v1.argmax(1), range(3)), pd.Categorical(v2.argmax(1), range(3))
    )
    assert [r["champion \\ canary"] for r in data["confusion"]] == names
    assert [[r[n] for n in names] for r in data["confusion"]] == confusion.to_numpy().tolist()
    agreement = {r["class"]: r for r in data["class_agreement"]}
    for k, name in enumerate(names):
        assert agreement[name]["canary"] == (v2.argmax(1) == k).sum()
        both = ((v1.argmax(1) == k) & (v2.argmax(1) == k)).sum()
        assert agreement[name]["both"] == both
    deltas = {r["class"]: r for r in data["probability_delta"]}
    assert list(deltas) == names
    for k, name in enumerate(names):
        assert deltas[name]["mean"] == pytest.approx((v2 - v1)[:, k].mean())


@pytest.mark.parametrize("rows", [600, 2400])
def test_a_clean_regression_canary_passes_and_a_biased_one_fails(stack: Any, rows: int) -> None:
    _traffic(stack, "house", {"champion": "1", "canary": "2"}, _house(rows, 10), "clean")
    clean = monitoring.analyze(stack, "house", "1h")
    assert clean.verdict == "pass", [c for c in clean.checks if c.passed is False]
    assert [c.name for c in clean.checks][4:] == ["paired_score", "mae", "rmse", "bias"]
    _traffic(stack, "house", {"champion": "1", "canary": "3"}, _house(rows, 11), "biased")
    biased = monitoring.analyze(stack, "house", "1h", version="3")
    checks = _checks(biased)
    assert biased.verdict == "fail"
    assert checks["paired_score"].passed is True  # it orders houses alike: only bias shows
    assert checks["bias"].passed is False and checks["bias"].canary > 1.5


def test_multiclass_drift_compares_predicted_classes_and_judges_quality(
    stack: Any, cli_in_process: Any
) -> None:
    from mlflow import MlflowClient

    # the label column's name as the version's tag mlpipe.label records it (register wrote "label")
    client = MlflowClient(tracking_uri=stack.registry, registry_uri=stack.registry)
    client.set_model_version_tag("iris", "1", "mlpipe.label", "species")
    _traffic(stack, "iris", {"champion": "1", "canary": "1"}, _iris(800, 20), "clean")
    result = cli_in_process("monitor", "drift", "iris", "--window", "1h", "--arm", "champion")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "quality champion: accuracy=" in result.stdout and "macro_f1=" in result.stdout
    # which baseline each metric was judged against; class names in brackets printed as such
    baseline = next(
        line for line in result.stdout.splitlines() if line.startswith("quality champion: base")
    )
    assert baseline.startswith(
        "quality champion: baseline: macro_f1, log_loss, recall[setosa], recall[versicolor], "
        "recall[virginica] measured at register on dataset iris.parquet (the registration "
        "dataset); accuracy given with --metric at register"
    ), baseline
    (entry,) = warehouse.list_reports(stack, model="iris", kind="drift")
    (arm,) = json.loads((Path(entry.path) / "summary.json").read_text())["arms"]
    prediction = next(c for c in arm["columns"] if c["column"] == "prediction")
    assert prediction["method"] == "jensenshannon" and prediction["status"] == "ok"
    assert "positive_rate" not in {c["column"] for c in arm["columns"]}
    quality = arm["quality"]
    assert quality["task"] == "multiclass" and quality["status"] == "ok"
    assert 0.6 < quality["accuracy"] <= 1 and "accuracy" in quality["evidently"]
    assert f"quality champion: {quality['baseline']}" == baseline
    page = (Path(entry.path) / "champion-quality.html").read_text()
    assert "Target: 'species" in page and "Target: 'target" not in page  # the label's name


def test_register_records_the_label_column_that_titles_the_quality_page(stack: Any) -> None:
    assert registry.show(stack, "house/1").tags.get("mlpipe.label") == "label"


def test_shifted_inputs_drift_the_predicted_classes(stack: Any) -> None:
    _traffic(stack, "iris", {"champion": "1", "canary": "1"}, _iris(800, 21, shift=1.5), "moved")
    result = monitoring.drift(stack, "iris", "1h", arm="champion")
    (arm,) = result.arms
    prediction = next(c for c in arm.columns if c.column == "prediction")
    assert result.verdict == "drift" and prediction.drifted


def test_regression_drift_compares_predicted_values(stack: Any) -> None:
    _traffic(stack, "house", {"champion": "1", "canary": "1"}, _house(800, 20), "clean")
    (arm,) = monitoring.drift(stack, "house", "1h", arm="champion").arms
    prediction = next(c for c in arm.columns if c.column == "prediction")
    assert prediction.method == "wasserstein" and prediction.status == "ok"
    assert arm.quality is not None and arm.quality.task == "regression"
    mae = arm.quality.figures["mae"]
    assert mae is not None and mae < 6 and "mae" in (arm.quality.evidently or {})
    assert arm.verdict == "ok", arm.alarms


def test_shadow_analyze_of_a_multiclass_version_reports_class_agreement(
    stack: Any, cli_in_process: Any
) -> None:
    records = _traffic(stack, "iris", {"champion": "1", "canary": "1"}, _iris(600, 30), "sh")
    x = np.array([[r.features[f] for f in IRIS] for r in records], dtype=float)
    mirrored = []
    for r, p in zip(records, _predictions(stack, "iris", "3", x), strict=True):
        mirrored.append(
            PredictionRecord(
                **{f: getattr(r, f) for f in r.__struct_fields__ if f not in {"arm", "version"}}
                | {"arm": "shadow", "version": "3", "score": p.score, "label": p.label,
                   "probabilities": list(p.probabilities or ())}
            )
        )  # fmt: skip
    _log(stack, mirrored, "mirror", [])
    result = cli_in_process("shadow", "analyze", "iris")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "label agreement: " in result.stdout
    assert "probability delta per class (shadow - champion)" in result.stdout
    for name in ("setosa", "versicolor", "virginica"):  # class names, not indices
        assert name in result.stdout
    assert "paired_classes" in result.stdout and "FAIL" in result.stdout
