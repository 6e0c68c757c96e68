"""Register measures a version's baseline on a holdout (``--eval-dataset``) and says so; a
class whose recall collapses in a labelled window alarms by name (issue 28, item 5).

The data is none the demo makes: a numeric input with gaps, two string inputs (one the
model scores unseen values of, one it cannot) and classes named by text (see
``tests/unit/registry/test_eval_dataset.py``, where bad holdouts are refused).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import registry, warehouse
from mlpipe.config import load_settings
from mlpipe.predlog import ENCODER, PredictionRecord
from mlpipe.registry import _lineage
from tests.conftest import run_in_process
from tests.unit.registry.test_eval_dataset import SPECIES, frame, pipeline

pytestmark = pytest.mark.integration
INPUTS = ["amount", "color", "plan"]


def _files(root: Path) -> tuple[Path, Path, Path, Any]:
    """model.joblib, train.csv and holdout.csv under ``root``, and the fitted model."""
    import joblib

    train, holdout = frame(600, 0), frame(400, 1)
    model = pipeline().fit(train[INPUTS], train["species"])
    joblib.dump(model, root / "model.joblib")
    train.to_csv(root / "train.csv", index=False)
    holdout.to_csv(root / "holdout.csv", index=False)
    return root / "model.joblib", root / "train.csv", root / "holdout.csv", model


def _register(settings: Any, holdout: bool, **extra: Any) -> tuple[registry.VersionInfo, Any]:
    model_path, train, held, model = _files(settings.home)
    info = registry.register(
        settings,
        "species",
        dataset=train,
        model_path=model_path,
        label="species",
        eval_dataset=held if holdout else None,
        **extra,
    )
    return info, model


@pytest.fixture(scope="module")
def with_holdout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, registry.VersionInfo, Any]:
    """A home with ``species`` registered once with ``--eval-dataset``: its settings, the
    version and the fitted model (a test that writes to a home works on a copy)."""
    root = tmp_path_factory.mktemp("holdout-template")
    settings = load_settings(home=root)
    info, model = _register(settings, holdout=True)
    return settings, info, model


def test_a_holdout_baseline_is_measured_on_it_and_says_so(
    with_holdout: tuple[Any, registry.VersionInfo, Any],
) -> None:
    from sklearn.metrics import accuracy_score, recall_score

    settings, info, model = with_holdout
    held = pd.read_csv(settings.home / "holdout.csv")
    tags = registry.show(settings, f"species/{info.version}").tags
    assert tags["mlpipe.metrics_source"] == "holdout"
    assert tags["mlpipe.metrics_on"] == "dataset holdout.csv (the --eval-dataset holdout)"
    assert tags["mlpipe.eval_dataset"] == "holdout.csv"
    assert tags["mlpipe.eval_data_sha256"] == _lineage.file_sha256(settings.home / "holdout.csv")
    assert tags["mlpipe.dataset"] == "train.csv"  # the lineage is still the training set
    assert tags["mlpipe.metrics_measured"] == "accuracy,log_loss,macro_f1"
    predicted = model.predict(held[INPUTS])  # gaps and strings, scored by the pipeline itself
    shown = registry.show(settings, f"species/{info.version}")
    assert shown.metrics["accuracy"] == pytest.approx(accuracy_score(held["species"], predicted))
    per_class = recall_score(held["species"], predicted, labels=list(SPECIES), average=None)
    assert list(shown.class_recall) == list(SPECIES)
    for name, value in zip(SPECIES, per_class, strict=True):
        assert shown.class_recall[name] == pytest.approx(value)
    assert shown.baseline_on_holdout


def test_without_a_holdout_the_baseline_is_the_training_data(settings: Any) -> None:
    info, _ = _register(settings, holdout=False, metrics={"accuracy": 0.5})
    shown = registry.show(settings, f"species/{info.version}")
    assert shown.tags["mlpipe.metrics_source"] == "training"
    assert shown.tags["mlpipe.metrics_on"] == "dataset train.csv (the registration dataset)"
    assert "mlpipe.eval_dataset" not in shown.tags
    assert shown.metrics["accuracy"] == 0.5  # given with --metric: wins
    assert shown.tags["mlpipe.metrics_measured"] == "log_loss,macro_f1"
    assert set(shown.class_recall) == set(SPECIES)
    assert not shown.baseline_on_holdout


def test_the_cli_refuses_a_bad_holdout_in_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model_path, train, _, _ = _files(home)
    args = ["register", "species", "--model", str(model_path), "--dataset", str(train)]
    code, out, err = run_in_process(
        monkeypatch, capsys, *args, "--label", "species", "--eval-dataset", "nope.csv"
    )
    assert (code, out) == (2, "")
    assert err.strip() == "error: --eval-dataset file nope.csv does not exist"
    code, _, err = run_in_process(
        monkeypatch, capsys, "register", "species", "--quantize", "int8", "--dataset",
        str(train), "--eval-dataset", str(train),
    )  # fmt: skip
    assert code == 2 and err.strip().startswith("error: --eval-dataset goes with --model or --run")
    assert registry.list_models(load_settings()) == []


def _traffic(settings: Any, version: str, window: pd.DataFrame, outcomes: list[str]) -> None:
    """Log ``window`` scored by the version, as the gateway logs it, and load ``outcomes``."""
    loaded = registry.load_verified(settings, "species", version)
    scores = loaded.predict_scores(loaded.inputs_from(window))
    answers = loaded.task.predictions(loaded.task.check_output(scores, len(window)))
    customers = np.random.default_rng(5).integers(0, 400, len(window))
    now = time.time() - 5
    records = []
    for i, (p, row) in enumerate(zip(answers, window[INPUTS].to_dict("records"), strict=True)):
        features = {k: None if v != v else v for k, v in row.items()}  # a gap is logged as null
        records.append(
            PredictionRecord(
                request_id=f"r-{i}", ts=now - i * 0.01, tenant="t", model="species",
                version=version, arm="champion", generation=1,
                entity_key=f"customer_id={customers[i]}", entity={"customer_id": int(customers[i])},
                features=features, score=p.score, label=p.label, latency_ms=3.0,
                probabilities=list(p.probabilities or ()),
            )
        )  # fmt: skip
    log = settings.predlog_path / "traffic.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    path = settings.home / "labels.csv"
    ids = [r.request_id for r in records]
    pd.DataFrame({"request_id": ids, "label": outcomes}).to_csv(path, index=False)
    warehouse.load_outcomes(settings, path)


def test_a_collapsed_class_alarms_by_name_against_the_holdout_baseline(
    home: Path,
    with_holdout: tuple[Any, registry.VersionInfo, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    template, info, _ = with_holdout
    shutil.copytree(template.home / ".mlpipe", home / ".mlpipe")
    settings = load_settings()
    window = frame(2000, 9)
    # The world moved: 80 % of what was versicolor is virginica now, and the model, which
    # still calls them versicolor, finds far fewer of the virginica.
    truth = window["species"].to_numpy()
    moved = (truth == "versicolor") & (np.random.default_rng(6).uniform(0, 1, 2000) < 0.8)
    outcomes = np.where(moved, "virginica", truth).tolist()
    _traffic(settings, info.version, window, outcomes)
    args = ("monitor", "drift", "species", "--window", "1h", "--arm", "champion")
    code, out, err = run_in_process(monkeypatch, capsys, *args)  # the CLI's entry point
    assert code == 1, out + err
    assert "alarm champion: quality: recall of class 'virginica' below the registered value" in out
    assert "recall of class 'setosa'" not in out
    assert "registration dataset (optimistic)" not in out  # a holdout: tight margins
