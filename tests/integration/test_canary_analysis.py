"""Canary analysis on real registered models, the real warehouse and the real CLI.

Traffic is logged the way the gateway logs it: each arm's rows carry the score
the serving version gave for the logged features, so the analysis can re-score
every row with both versions (loaded verified from MLflow) and pair them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import monitoring, registry, warehouse
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration
FEATURES = ["amount", "txn_count_7d"]


def _traffic(
    settings: Any, arms: dict[str, str], rows: int = 600, seed: int = 0, scores: str = "served"
) -> None:
    """``rows`` labelled requests from 200 customers, split 50/50 by customer over ``arms``."""
    rng = np.random.default_rng(seed)
    customers = rng.integers(0, 200, rows)
    frame = pd.DataFrame(
        {"amount": rng.gamma(2.0, 30.0, rows), "txn_count_7d": rng.poisson(5, rows)}
    )
    truth = ((frame["amount"] / 60 + rng.normal(0, 1, rows)) > 1.5).astype(int)
    models = {v: registry.load_verified(settings, "fraud", v) for v in set(arms.values())}
    now, records = time.time() - 5, []
    for i, customer in enumerate(customers):
        arm = "canary" if customer % 2 else "champion"
        version = arms[arm]
        x = frame.iloc[[i]][FEATURES].to_numpy(dtype=float)
        served = float(models[version].predict_scores(x)[0])
        score = served if scores == "served" else float(rng.uniform())
        records.append(
            PredictionRecord(
                request_id=f"s{seed}-{i}", ts=now - i * 0.01, tenant="t", model="fraud",
                version=version, arm=arm, generation=1,  # type: ignore[arg-type]
                entity_key=f"customer_id={customer}", entity={"customer_id": int(customer)},
                features={f: float(frame.iloc[i][f]) for f in FEATURES},
                score=score, label=int(score >= 0.5), latency_ms=4.0,
            )
        )  # fmt: skip
    log = settings.predlog_path / f"traffic-{seed}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    labels = settings.home / f"labels-{seed}.csv"
    ids = [r.request_id for r in records]
    pd.DataFrame({"request_id": ids, "label": truth}).to_csv(labels, index=False)
    warehouse.load_outcomes(settings, labels)


def _register_blind_model(settings: Any, home: Path) -> str:
    """A LightGBM trained on shuffled labels: it cannot tell fraud from the inputs."""
    import joblib
    from lightgbm import LGBMClassifier

    frame = pd.read_parquet(home / "inputs" / "train-1.parquet")
    shuffled = frame.assign(label=np.random.default_rng(0).permutation(frame["label"].to_numpy()))
    model = LGBMClassifier(n_estimators=20, verbose=-1, random_state=0)
    model.fit(shuffled[FEATURES], shuffled["label"])
    model_path, data_path = home / "blind.joblib", home / "blind.parquet"
    joblib.dump(model, model_path)
    shuffled.to_parquet(data_path, index=False)
    return registry.register(settings, "fraud", dataset=data_path, model_path=model_path).version


def test_one_model_on_both_arms_passes_paired_through_the_cli(
    registered_home: Path, settings: Any, cli_in_process: Any
) -> None:
    _traffic(settings, {"champion": "1", "canary": "1"})
    result = cli_in_process("canary", "analyze", "fraud")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: pass (both versions on the same rows)" in result.stdout
    (entry,) = warehouse.list_reports(settings, model="fraud", kind="canary")
    assert entry.version == "1" and entry.verdict == "pass"
    checks = {c["name"]: c for c in entry.summary["checks"]}
    assert checks["paired_score"]["passed"] is True
    assert checks["auc"]["champion"] == checks["auc"]["canary"]
    page = Path(entry.path).with_name("canary.html").read_text()
    assert "paired_score" in page and "<script" not in page


def test_a_label_shuffled_canary_fails_on_auc_and_the_paired_score_test(
    registered_home: Path, settings: Any, cli_in_process: Any
) -> None:
    blind = _register_blind_model(settings, registered_home)
    _traffic(settings, {"champion": "1", "canary": blind}, rows=1000)
    result = monitoring.analyze(settings, "fraud", "1h")
    failed = {c.name for c in result.checks if c.passed is False}
    assert result.verdict == "fail" and result.paired
    assert {"paired_score", "auc"} <= failed
    assert result.canary_version == blind
    assert monitoring.latest_canary_verdict(settings, "fraud", blind) == "fail"
    # a binary version's per-class tables too: each arm's share of 0 and 1 on its own rows,
    # both versions' predicted classes on every re-scored row
    assert [r["class"] for r in result.arm_classes] == ["0", "1"]
    for side in ("champion", "canary"):
        assert sum(r[f"{side}_share"] for r in result.arm_classes) == pytest.approx(1.0)
        assert sum(r[f"{side}_labelled"] for r in result.arm_classes) > 0
    analysed = result.champion_requests + result.canary_requests
    assert sum(r["0"] + r["1"] for r in result.confusion) == analysed


def test_the_current_canary_version_is_analysed_not_the_arm(
    registered_home: Path, settings: Any
) -> None:
    _traffic(settings, {"champion": "1", "canary": "2"}, seed=1)
    _traffic(settings, {"champion": "1", "canary": "1"}, rows=300, seed=2)  # newer canary
    result = monitoring.analyze(settings, "fraud", "1h")
    assert result.canary_version == "1"
    assert result.canary_requests < 200 and result.verdict == "insufficient"
    older = monitoring.analyze(settings, "fraud", "1h", version="2")
    assert older.canary_version == "2" and older.canary_requests > 200
    # v1 and v2 are two noisy, equally good models: they order requests differently
    # (Spearman about 0.6), which is not a failure.
    assert older.verdict == "pass", [c for c in older.checks if c.passed is False]
    assert monitoring.latest_canary_verdict(settings, "fraud", "1") == "insufficient"


def test_a_log_the_models_do_not_reproduce_is_not_paired_and_says_why(
    registered_home: Path, settings: Any
) -> None:
    _traffic(settings, {"champion": "1", "canary": "2"}, scores="random")
    result = monitoring.analyze(settings, "fraud", "1h")
    assert not result.paired
    (note,) = result.notes
    assert "re-scoring champion v1 from the logged features reproduces" in note
    paired_score = next(c for c in result.checks if c.name == "paired_score")
    assert paired_score.passed is None and paired_score.detail == note
