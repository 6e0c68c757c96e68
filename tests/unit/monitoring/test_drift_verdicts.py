"""Calibrated drift verdicts on synthetic windows: real Evidently, no warehouse.

Customers have static profile columns (one value per customer) and per-request
columns. Clean windows are fresh draws from the same process as the reference
(never the reference's own rows), of 100 to 10,000 requests, including a sticky
20 % arm that holds a fixed subset of customers: none of them may raise an
alarm. ``amount`` x 3 must, naming ``amount``; scores that rise must be
prediction drift; flipped outcomes for a segment must be a ``quality`` verdict.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe.config import load_settings
from mlpipe.monitoring import _calibration as cal
from mlpipe.monitoring import _drift
from mlpipe.monitoring._arm_window import ArmWindow
from mlpipe.monitoring._drift_verdict import EXIT_CODES, ArmDrift
from mlpipe.monitoring._quality import RegisteredMetrics, quality
from mlpipe.monitoring._reference import Reference

CUSTOMERS = 2000


def _population(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "customer": np.arange(CUSTOMERS),
            "account_age_days": rng.gamma(2.0, 300.0, CUSTOMERS).round(),
            "country_risk": rng.choice(["low", "mid", "high"], CUSTOMERS, p=[0.7, 0.2, 0.1]),
        }
    )


POP = _population(0)


def _requests(n: int, seed: int, customers: np.ndarray | None = None) -> pd.DataFrame:
    """``n`` requests from ``customers`` (default: all), a few per customer, with scores."""
    rng = np.random.default_rng(seed)
    pool = np.arange(CUSTOMERS) if customers is None else customers
    weights = rng.gamma(0.7, 1.0, len(pool))  # some customers buy far more than others
    who = rng.choice(pool, n, p=weights / weights.sum())
    frame = POP.iloc[who].reset_index(drop=True)
    frame["amount"] = rng.lognormal(3.5, 1.0, n)
    frame["hour"] = rng.integers(0, 24, n).astype(float)
    logit = -4.0 + 0.02 * (frame["amount"] - 33) + 0.8 * (frame["country_risk"] == "high")
    frame["score"] = 1 / (1 + np.exp(-logit))
    frame["outcome"] = (rng.random(n) < frame["score"]).astype(float)
    return frame


FEATURES = ["account_age_days", "country_risk", "amount", "hour"]
REFERENCE = _requests(5000, 99)


def _ref() -> Reference:
    frame = REFERENCE[FEATURES].assign(prediction=REFERENCE["score"])
    return Reference(frame=frame, positive_rate=float((REFERENCE["score"] >= 0.5).mean()))


def _window(frame: pd.DataFrame) -> ArmWindow:
    rows = pd.DataFrame(
        {
            "version": "1",
            "ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(len(frame)), unit="s"),
            "score": frame["score"],
            "label": (frame["score"] >= 0.5).astype(int),
            "outcome": frame.get("label_outcome", pd.Series(np.nan, index=frame.index)),
        }
    )
    entities = "customer_id=" + frame["customer"].astype(str)
    return ArmWindow(
        rows=rows, features=frame[FEATURES], entities=entities, total=len(frame), sampled=False
    )


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory):
    return load_settings(home=tmp_path_factory.mktemp("home"))


def _judge(settings, frame: pd.DataFrame, tmp_path: Path) -> ArmDrift:  # type: ignore[no-untyped-def]
    return _drift._arm_result(settings, "fraud", "champion", _window(frame), _ref(), tmp_path, 0.01)


@pytest.mark.parametrize("n", [100, 300, 1000, 10_000])
def test_clean_windows_and_sticky_arms_raise_no_alarm(settings, tmp_path: Path, n: int) -> None:
    whole = _judge(settings, _requests(n, n), tmp_path)
    assert whole.verdict == "ok", (whole.alarms, whole.columns)
    sticky = _requests(n, n + 1, customers=np.arange(0, CUSTOMERS, 5))  # a 20 % arm
    arm = _judge(settings, sticky, tmp_path)
    assert arm.verdict in ("ok", "insufficient"), (arm.alarms, arm.columns)
    assert arm.drifted_features == []
    static = {c.column: c for c in arm.columns}["account_age_days"]
    assert static.status == "insufficient" or static.threshold is not None
    # a static column's effective size is about the number of customers, not of requests
    if static.effective_size is not None and arm.entities is not None:
        assert static.effective_size <= arm.entities + 1


def test_a_tiny_arm_is_insufficient_never_drift(settings, tmp_path: Path) -> None:
    few = _requests(200, 5, customers=np.arange(12))  # 200 requests from 12 customers
    few["amount"] *= 3
    result = _judge(settings, few, tmp_path)
    assert result.entities == 12
    assert result.verdict == "insufficient" and EXIT_CODES[result.verdict] == 0


def test_amount_times_three_is_an_alarm_naming_amount(settings, tmp_path: Path) -> None:
    frame = _requests(1000, 7)
    frame["amount"] *= 3
    result = _judge(settings, frame, tmp_path)
    assert result.verdict == "drift"
    assert "amount" in result.drifted_features
    assert {"account_age_days", "country_risk", "hour"}.isdisjoint(result.drifted_features)
    amount = next(c for c in result.columns if c.column == "amount")
    assert amount.severity == "high" and amount.score > amount.threshold
    assert any(a.startswith("amount") for a in result.alarms)


def test_rising_scores_are_prediction_drift(settings, tmp_path: Path) -> None:
    frame = _requests(1000, 8)
    frame["score"] = np.clip(frame["score"] * 2.5, 0, 1)
    result = _judge(settings, frame, tmp_path)
    assert result.verdict == "drift" and result.drifted_features == []
    prediction = next(c for c in result.columns if c.column == "prediction")
    assert prediction.drifted and prediction.kind == "prediction"


def test_flipped_labels_for_a_segment_are_a_quality_verdict() -> None:
    frame = _requests(3000, 9)
    rows = _window(frame).rows
    rows["outcome"] = frame["outcome"].to_numpy()
    registered = quality(rows, frame["customer"].to_numpy(), None, 100)
    assert registered.status == "not judged"
    point = RegisteredMetrics(
        metrics={"auc": 0.80, "recall": np.nan, "precision": np.nan, "log_loss": 0.15}
    )
    clean = quality(rows, frame["customer"].to_numpy(), point, 100)
    assert clean.status == "ok", clean.metrics
    high = (frame["country_risk"] == "high").to_numpy()
    rows.loc[high, "outcome"] = 1 - rows.loc[high, "outcome"]
    flipped = quality(rows, frame["customer"].to_numpy(), point, 100)
    assert flipped.status == "quality" and flipped.alarms, flipped.metrics
    assert "outcomes for 3000 of 3000" in flipped.label_lag


def test_numpy_null_statistic_is_evidentlys(settings, tmp_path: Path) -> None:
    frame = _requests(500, 11)
    frame["amount"] *= 1.2
    result = _judge(settings, frame, tmp_path)
    scores = {c.column: c.score for c in result.columns}
    ref = REFERENCE["amount"].to_numpy()
    assert scores["amount"] == pytest.approx(
        cal.distance("numerical", ref, frame["amount"].to_numpy())
    )
    cats = REFERENCE["country_risk"].to_numpy()
    assert scores["country_risk"] == pytest.approx(
        cal.distance("categorical", cats, frame["country_risk"].to_numpy())
    )


def test_thresholds_shrink_with_the_window_and_are_cached(tmp_path: Path) -> None:
    ref = REFERENCE[["amount"]]
    cache = cal.NullCache(tmp_path, "m", "1", ref)
    values = ref["amount"].to_numpy()
    alpha = cal.per_column_alpha(0.01, 5)
    small = cache.fit("amount", "numerical", values, cal.size_bucket(100)).threshold(alpha)
    large = cache.fit("amount", "numerical", values, cal.size_bucket(10_000)).threshold(alpha)
    assert small > 2 * large
    again = cal.NullCache(tmp_path, "m", "1", ref)
    assert (
        again.fit("amount", "numerical", values[:10], cal.size_bucket(100)).threshold(alpha)
        == small
    )
    assert cal.size_bucket(92) <= 92 and cal.size_bucket(1000) <= 1000
    assert alpha == pytest.approx(1 - 0.99 ** (1 / 5))
