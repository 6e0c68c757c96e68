"""The synthetic transaction stream: deterministic, shiftable, and free of look-ahead."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from mlpipe.demo import generate
from mlpipe.errors import InvalidInput

END = datetime(2025, 3, 1, tzinfo=UTC)


def _frames(out: Path, **kwargs: object) -> dict[str, pd.DataFrame]:
    data = generate(out, customers=40, days=6, end=END, **kwargs)  # type: ignore[arg-type]
    return {
        "stats": pd.read_parquet(data.customer_stats),
        "profile": pd.read_parquet(data.customer_profile),
        "txns": pd.read_parquet(data.transactions),
    }


def test_same_seed_gives_identical_frames(tmp_path: Path) -> None:
    first = _frames(tmp_path / "a", seed=11)
    second = _frames(tmp_path / "b", seed=11)
    other = _frames(tmp_path / "c", seed=12)
    for name in first:
        pd.testing.assert_frame_equal(first[name], second[name])
    assert not first["txns"].equals(other["txns"])


def test_shift_changes_only_the_named_columns(tmp_path: Path) -> None:
    factors = {"amount_mean_7d": 2.0, "amount": 1.5}
    base = _frames(tmp_path / "base")
    shifted = _frames(tmp_path / "shifted", shift=factors)
    for name, frame in base.items():
        for column in frame:
            expected = frame[column] * factors[column] if column in factors else frame[column]
            pd.testing.assert_series_equal(shifted[name][column], expected)


def test_unknown_shift_and_bad_sizes_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot shift nope"):
        generate(tmp_path, customers=5, days=2, end=END, shift={"nope": 2.0})
    with pytest.raises(InvalidInput, match=">= 1"):
        generate(tmp_path, customers=0, days=2, end=END)


def test_snapshots_summarize_only_earlier_transactions(tmp_path: Path) -> None:
    frames = _frames(tmp_path)
    stats, txns = frames["stats"], frames["txns"]
    assert stats["event_timestamp"].max() == pd.Timestamp(END)
    assert txns["event_timestamp"].max() < pd.Timestamp(END)
    for snap in stats.sample(60, random_state=0).itertuples():
        window = txns[
            (txns.customer_id == snap.customer_id)
            & (txns.event_timestamp < snap.event_timestamp)
            & (txns.event_timestamp >= snap.event_timestamp - pd.Timedelta(days=7))
        ]
        assert snap.txn_count_7d == len(window)
        assert snap.amount_max_7d == pytest.approx(window.amount.max() if len(window) else 0.0)


def test_labels_are_learnable_from_point_in_time_features(tmp_path: Path) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score

    data = generate(tmp_path, customers=300, days=20, end=END)
    stats = pd.read_parquet(data.customer_stats).drop(columns="created")
    txns = pd.read_parquet(data.transactions)
    joined = pd.merge_asof(txns, stats, on="event_timestamp", by="customer_id")
    columns = ["amount", "txn_count_1d", "txn_count_7d", "amount_mean_7d", "chargeback_rate_90d"]
    cut = int(len(joined) * 0.7)
    model = HistGradientBoostingClassifier(max_iter=100, random_state=0)
    model.fit(joined[columns][:cut], joined.is_fraud[:cut])
    scores = model.predict_proba(joined[columns][cut:])[:, 1]
    assert 0.005 < data.fraud_rate < 0.1
    assert roc_auc_score(joined.is_fraud[cut:], scores) > 0.7
