"""Register records a version's own metrics; labels at chance level then alarm (issue 28, item 5).

Before the fix a binary version registered without ``--metric`` had no metrics:
its quality check compared the window with NaN and printed ok, although the
labels were at chance level (AUC about 0.5).
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
from mlpipe.predlog import ENCODER, PredictionRecord
from tests.conftest import run_in_process

pytestmark = pytest.mark.integration
INPUTS = ["amount", "age"]


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (rows, 2))
    p = 1 / (1 + np.exp(-(2.5 * x[:, 0] - 1.5 * x[:, 1])))
    return pd.DataFrame({"amount": x[:, 0], "age": x[:, 1], "label": rng.uniform(0, 1, rows) < p})


def _register(settings: Any, root: Path) -> str:
    import joblib
    from sklearn.linear_model import LogisticRegression

    frame = _frame(2000, 0).assign(label=lambda f: f["label"].astype(int))
    model = LogisticRegression().fit(frame[INPUTS].to_numpy(), frame["label"].to_numpy())
    joblib.dump(model, root / "model.joblib")
    frame.to_parquet(root / "train.parquet", index=False)
    info = registry.register(
        settings, "fraud", dataset=root / "train.parquet", model_path=root / "model.joblib"
    )
    return info.version


def _traffic(settings: Any, version: str, labels: np.ndarray, x: np.ndarray) -> None:
    loaded = registry.load_verified(settings, "fraud", version)
    answers = loaded.task.predictions(loaded.task.check_output(loaded.predict_scores(x), len(x)))
    now = time.time() - 5
    records = [
        PredictionRecord(
            request_id=f"r-{i}", ts=now - i * 0.01, tenant="t", model="fraud", version=version,
            arm="champion", generation=1, entity_key=f"customer_id={i % 400}",
            entity={"customer_id": i % 400}, features=dict(zip(INPUTS, x[i].tolist(), strict=True)),
            score=p.score, label=p.label, latency_ms=3.0,
        )
        for i, p in enumerate(answers)
    ]  # fmt: skip
    log = settings.predlog_path / "traffic.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    path = settings.home / "labels.csv"
    ids = [r.request_id for r in records]
    pd.DataFrame({"request_id": ids, "label": labels.astype(int)}).to_csv(path, index=False)
    warehouse.load_outcomes(settings, path)


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A home with ``fraud`` registered once by :func:`_register`, and that version."""
    from mlpipe.config import Settings

    root = tmp_path_factory.mktemp("baseline-template")
    return root, _register(Settings(home=root), root)


def test_register_records_the_versions_own_metrics_on_its_dataset(
    registered: tuple[Path, str],
) -> None:
    from mlpipe.config import Settings

    root, version = registered
    shown = registry.show(Settings(home=root), f"fraud/{version}")
    assert set(shown.metrics) >= {"auc", "recall", "precision", "log_loss"}
    assert 0.8 < shown.metrics["auc"] < 1.0
    assert shown.tags["mlpipe.metrics_on"] == ("dataset train.parquet (the registration dataset)")


def test_labels_at_chance_level_raise_a_quality_alarm(
    home: Path,
    registered: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mlpipe.config import load_settings

    template, version = registered
    shutil.copytree(template / ".mlpipe", home / ".mlpipe")
    settings = load_settings()
    window = _frame(1500, 7)
    chance = np.random.default_rng(3).uniform(0, 1, len(window)) < window["label"].mean()
    _traffic(settings, version, chance, window[INPUTS].to_numpy())
    args = ("monitor", "drift", "fraud", "--window", "1h", "--arm", "champion")
    code, out, err = run_in_process(monkeypatch, capsys, *args)  # the CLI's entry point
    assert code == 1, out + err
    assert "alarm champion: quality: auc below the registered value" in out
    assert "status=quality" in out
