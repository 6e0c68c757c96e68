"""The feature layer against a real Feast repository (sqlite online store, file offline store).

Each test works on a copy of ``feature_repo/`` in a temporary directory, with a
small generated data set (30 customers, 4 days).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from mlpipe import demo, features
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput, NotFound
from mlpipe.features import OnlineFeatures

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2] / "feature_repo"
STATS = ["txn_count_1d", "txn_count_7d", "amount_mean_7d", "amount_max_7d", "chargeback_rate_90d"]
PROFILE = ["account_age_days", "country_risk"]
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def copy_repo(home: Path) -> Settings:
    """A fresh copy of the feature repo (no data, no registry) under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("data", "__pycache__")
    shutil.copytree(REPO, home / "feature_repo", ignore=ignore)
    return Settings(home=home)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Data ending this hour, applied and materialized: every customer has fresh features."""
    settings = copy_repo(tmp_path_factory.mktemp("live"))
    demo.generate(settings.feature_repo_path / "data", customers=30, days=4, end=NOW)
    features.apply(settings)
    features.materialize(settings, end=NOW + timedelta(minutes=5))
    yield settings


def latest(settings: Settings, name: str) -> pd.DataFrame:
    frame = pd.read_parquet(settings.feature_repo_path / "data" / f"{name}.parquet")
    return frame.sort_values("event_timestamp").groupby("customer_id").last()


def test_online_read_returns_the_materialized_values(live: Settings) -> None:
    online = OnlineFeatures(live, "fraud_v2", cache_ttl_s=60, cache_size=100)
    rows = online.get_many([{"customer_id": 3}, {"customer_id": 7}, {"customer_id": 3}])
    stats, profile = latest(live, "customer_stats"), latest(live, "customer_profile")
    for row, customer in zip(rows, (3, 7, 3), strict=True):
        assert row.missing == []
        assert not row.cache_hit
        assert list(row.values) == STATS + PROFILE
        for name in STATS:
            assert row.values[name] == pytest.approx(float(stats.loc[customer, name]))
        for name in PROFILE:
            assert row.values[name] == pytest.approx(float(profile.loc[customer, name]))
    again = online.get({"customer_id": "7"})
    assert again.cache_hit and again.values == rows[1].values
    assert online.stats().hits == 1 and online.stats().misses == 3


def test_unknown_entity_gets_defaults_and_bad_keys_are_input_errors(live: Settings) -> None:
    online = OnlineFeatures(live, "fraud_v2", cache_ttl_s=0, cache_size=0)
    row = online.get({"customer_id": 10_000})
    assert row.missing == STATS + PROFILE
    assert row.values == online.spec.defaults
    assert online.stats().missing_by_feature["country_risk"] == 1
    with pytest.raises(InvalidInput, match="customer_id"):
        online.get({"customer": 1})
    with pytest.raises(InvalidInput, match="integer"):
        online.get({"customer_id": 1.5})


def test_removed_or_corrupt_store_serves_defaults_without_raising(
    live: Settings, tmp_path: Path
) -> None:
    db = live.feature_repo_path / "data" / "online_store.db"
    backup = shutil.copy(db, tmp_path / "online_store.db")
    online = OnlineFeatures(live, "fraud_v1", cache_ttl_s=0, cache_size=0)
    assert online.get({"customer_id": 1}).missing == []
    try:
        db.unlink()
        gone = online.get_many([{"customer_id": 1}, {"customer_id": 2}])
        db.write_bytes(b"not a database" * 100)
        corrupt = online.get({"customer_id": 1})
    finally:
        shutil.copy(backup, db)
    for row in [*gone, corrupt]:
        assert row.missing == STATS
        assert row.values == online.spec.defaults
    assert online.stats().store_errors == 3
    assert online.get({"customer_id": 1}).missing == []  # recovers once the file is back


def test_value_older_than_its_ttl_comes_back_missing(tmp_path: Path) -> None:
    settings = copy_repo(tmp_path)
    end = NOW - timedelta(days=3)  # the last stats snapshot is 3 days old; the TTL is 2
    demo.generate(settings.feature_repo_path / "data", customers=5, days=2, end=end)
    features.apply(settings)
    features.materialize(settings, end=end + timedelta(hours=1))
    online = OnlineFeatures(settings, "fraud_v2", cache_ttl_s=60, cache_size=10)
    row = online.get({"customer_id": 2})
    assert row.missing == STATS
    assert all(row.values[name] == online.spec.defaults[name] for name in STATS)
    assert row.values["country_risk"] == pytest.approx(
        float(latest(settings, "customer_profile").loc[2, "country_risk"])
    )


def test_training_set_is_point_in_time_correct(tmp_path: Path) -> None:
    settings = copy_repo(tmp_path)
    data = settings.feature_repo_path / "data"
    demo.generate(data, customers=3, days=1, end=NOW)  # for the profile source
    # Irregular snapshots whose values are their own event time, so a value from
    # after a label's time (or from beyond the TTL) is visible in the result. The
    # 57-hour gap leaves some labels with no snapshot inside the 2-day TTL.
    start = pd.Timestamp(NOW) - pd.Timedelta(days=6)
    stamps = [start + pd.Timedelta(hours=h) for h in (0, 5, 17, 30, 31, 40, 97, 120, 121)]
    snaps = pd.DataFrame(
        [(c, t + pd.Timedelta(minutes=c)) for c in (1, 2, 3) for t in stamps],
        columns=["customer_id", "event_timestamp"],
    )
    epoch = snaps["event_timestamp"].astype("int64") // 10**9
    for name in STATS:
        snaps[name] = epoch.astype("float64") if "amount" in name or "rate" in name else epoch
    snaps["created"] = snaps["event_timestamp"]
    snaps.to_parquet(data / "customer_stats.parquet", index=False)
    features.apply(settings)

    labels = pd.DataFrame(
        {
            "customer_id": [1, 2, 3] * 40,
            "event_timestamp": [start + pd.Timedelta(minutes=73 * i - 30) for i in range(120)],
            "is_fraud": [i % 2 for i in range(120)],
        }
    )
    result = features.training_set(settings, "fraud_v1", labels)

    assert list(result.columns) == ["customer_id", "event_timestamp", "is_fraud", *STATS]
    pd.testing.assert_frame_equal(
        result[labels.columns],
        labels.assign(event_timestamp=pd.to_datetime(labels.event_timestamp, utc=True)),
    )
    seen = result["amount_max_7d"]
    label_s = result["event_timestamp"].astype("int64") // 10**9
    present = seen != 0.0
    assert (seen[present] <= label_s[present]).all(), "a feature from after its label leaked in"
    expected = (
        pd.merge_asof(
            labels.reset_index().sort_values("event_timestamp"),
            snaps[["customer_id", "event_timestamp", "amount_max_7d"]].sort_values(
                "event_timestamp"
            ),
            on="event_timestamp",
            by="customer_id",
            tolerance=pd.Timedelta(days=2),
        )
        .set_index("index")
        .sort_index()
    )
    assert present.sum() > 60 and (~present).sum() > 5  # both kinds of row are exercised
    assert list(seen) == list(expected["amount_max_7d"].fillna(0.0))


def test_training_set_keeps_rows_and_passthrough_columns(live: Settings) -> None:
    entities = features.read_entities(live.feature_repo_path / "data" / "transactions.parquet")
    result = features.training_set(live, "fraud_v2", entities)
    assert len(result) == len(entities)
    pd.testing.assert_frame_equal(result[entities.columns], entities)
    assert (result[STATS + PROFILE].dtypes == "float64").all()
    with pytest.raises(InvalidInput, match="customer_id"):
        features.training_set(live, "fraud_v2", entities.drop(columns="customer_id"))


def test_definition_hash_is_stable_and_follows_the_definition(
    live: Settings, tmp_path: Path
) -> None:
    spec = features.describe_service(live, "fraud_v1")
    assert spec == features.describe_service(live, "fraud_v1")
    assert spec.refs == [f"customer_stats:{name}" for name in STATS]
    assert spec.ttl_s["txn_count_1d"] == 2 * 86400
    assert len(spec.definition_sha256) == 64

    settings = copy_repo(tmp_path)  # another location, same definitions: same hash
    features.apply(settings)
    assert features.describe_service(settings, "fraud_v1").definition_sha256 == (
        spec.definition_sha256
    )
    definitions = settings.feature_repo_path / "fraud.py"
    definitions.write_text(
        definitions.read_text().replace(
            '        Field(name="chargeback_rate_90d"',
            '        Field(name="refund_count_7d", dtype=Int64, tags={"default": "0"}),\n'
            '        Field(name="chargeback_rate_90d"',
        )
    )
    features.apply(settings)
    changed = features.describe_service(settings, "fraud_v1")
    assert "refund_count_7d" in changed.features
    assert changed.definition_sha256 != spec.definition_sha256


def test_unknown_service_names_the_available_ones(live: Settings) -> None:
    with pytest.raises(NotFound, match=r"'fraud_v9' \(available: fraud_v1, fraud_v2\)"):
        features.describe_service(live, "fraud_v9")
    with pytest.raises(NotFound, match="fraud_v9"):
        OnlineFeatures(live, "fraud_v9")
    assert [s.name for s in features.list_services(live)] == ["fraud_v1", "fraud_v2"]
