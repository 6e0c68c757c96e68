"""Feast with the prod profile's Redis online store: apply, materialize, read online.

The repository is copied to a temp dir and its ``feature_store.prod.yaml`` gets
a project name of its own (``mlpipe_test_<hex>``): Feast's Redis keys end with
the project name, so this module deletes exactly its own keys afterwards and
never touches anyone else's (no FLUSHALL).
"""

from __future__ import annotations

import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mlpipe import demo, features
from mlpipe.config import Settings
from mlpipe.features import OnlineFeatures, open_store
from tests.integration.prod_services import redis_client, redis_connection_string

pytestmark = [pytest.mark.integration, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2] / "feature_repo"
PROD_YAML = "feature_store.prod.yaml"
STATS = ["txn_count_1d", "txn_count_7d", "amount_mean_7d", "amount_max_7d", "chargeback_rate_90d"]
PROFILE = ["account_age_days", "country_risk"]
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, object]]:
    """Data ending this hour, applied and materialized into Redis under a unique project."""
    with redis_client() as redis:
        home = tmp_path_factory.mktemp("prod-features")
        shutil.copytree(
            REPO, home / "feature_repo", ignore=shutil.ignore_patterns("data", "__pycache__")
        )
        config_file = home / "feature_repo" / PROD_YAML
        config = yaml.safe_load(config_file.read_text())
        project = f"mlpipe_test_{uuid.uuid4().hex[:10]}"
        config["project"] = project
        config["online_store"]["connection_string"] = redis_connection_string()
        config_file.write_text(yaml.safe_dump(config))
        settings = Settings(home=home, feature_store_yaml=PROD_YAML)
        try:
            demo.generate(settings.feature_repo_path / "data", customers=30, days=4, end=NOW)
            features.apply(settings)
            features.materialize(settings, end=NOW + timedelta(minutes=5))
            yield settings, redis
        finally:
            keys = list(redis.scan_iter(match=b"*" + project.encode(), count=1000))
            if keys:
                redis.delete(*keys)


def _latest(settings: Settings, name: str) -> pd.DataFrame:
    frame = pd.read_parquet(settings.feature_repo_path / "data" / f"{name}.parquet")
    return frame.sort_values("event_timestamp").groupby("customer_id").last()


def test_the_prod_yaml_selects_redis(live: tuple[Settings, object]) -> None:
    settings, _ = live
    store = open_store(settings)
    assert store.config.online_store.type == "redis"
    assert store.project.startswith("mlpipe_test_")


def test_materialized_values_are_in_redis_and_read_back(live: tuple[Settings, object]) -> None:
    settings, redis = live
    project = open_store(settings).project
    keys = list(redis.scan_iter(match=b"*" + project.encode(), count=1000))  # type: ignore[attr-defined]
    assert len(keys) == 30  # one hash per customer, holding both views' features
    online = OnlineFeatures(settings, "fraud_v2", cache_ttl_s=0, cache_size=0)
    rows = online.get_many([{"customer_id": 3}, {"customer_id": 29}])
    stats, profile = _latest(settings, "customer_stats"), _latest(settings, "customer_profile")
    for row, customer in zip(rows, (3, 29), strict=True):
        assert row.missing == []
        for name in STATS:
            assert row.values[name] == pytest.approx(float(stats.loc[customer, name]))
        for name in PROFILE:
            assert row.values[name] == pytest.approx(float(profile.loc[customer, name]))
    unknown = online.get({"customer_id": 10_000})
    assert unknown.missing == STATS + PROFILE and unknown.values == online.spec.defaults


def test_a_second_reader_sees_the_same_online_values(live: tuple[Settings, object]) -> None:
    """Another replica (a fresh store object, same config) reads what was materialized."""
    settings, _ = live
    one = OnlineFeatures(settings, "fraud_v2", cache_ttl_s=0, cache_size=0).get({"customer_id": 7})
    two = OnlineFeatures(settings, "fraud_v2", cache_ttl_s=0, cache_size=0).get({"customer_id": 7})
    assert one.values == two.values and one.missing == []


@pytest.fixture
def hung_redis() -> Iterator[int]:
    """A port that accepts connections (the kernel completes them) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        yield server.getsockname()[1]


def test_a_redis_that_stops_answering_gets_defaults_not_a_hang(
    live: tuple[Settings, object], hung_redis: int
) -> None:
    """The serving reader bounds each Redis read; the breaker then stops calling it."""
    settings, _ = live
    config_file = settings.feature_repo_path / PROD_YAML
    config = yaml.safe_load(config_file.read_text())
    config["online_store"]["connection_string"] = f"127.0.0.1:{hung_redis}"
    (settings.feature_repo_path / "feature_store.hung.yaml").write_text(yaml.safe_dump(config))
    hung = settings.model_copy(update={"feature_store_yaml": "feature_store.hung.yaml"})
    online = OnlineFeatures(hung, "fraud_v2", cache_ttl_s=0, cache_size=0)
    options = online._store.config.online_store.connection_string.split(",")
    assert {"socket_timeout=0.25", "socket_connect_timeout=0.25", "retry=null"} <= set(options)

    rows: list[object] = []
    reads = threading.Thread(
        target=lambda: rows.extend(online.get({"customer_id": c}) for c in range(5)), daemon=True
    )
    reads.start()
    reads.join(timeout=30)
    assert not reads.is_alive(), "a read of the silent Redis never returned"
    assert all(row.missing == STATS + PROFILE for row in rows)  # type: ignore[attr-defined]
    assert all(row.values == online.spec.defaults for row in rows)  # type: ignore[attr-defined]
    stats = online.stats()
    # breaker_failures (3) reads timed out; the breaker then answered the other two itself
    assert (stats.store_errors, stats.short_circuited) == (3, 2)


def test_a_timeout_set_in_the_config_is_kept(live: tuple[Settings, object]) -> None:
    settings, _ = live
    config_file = settings.feature_repo_path / PROD_YAML
    config = yaml.safe_load(config_file.read_text())
    config["online_store"]["connection_string"] += ",socket_timeout=2"
    (settings.feature_repo_path / "feature_store.slow.yaml").write_text(yaml.safe_dump(config))
    own = settings.model_copy(update={"feature_store_yaml": "feature_store.slow.yaml"})
    online = OnlineFeatures(own, "fraud_v2", cache_ttl_s=0, cache_size=0)
    options = online._store.config.online_store.connection_string.split(",")
    assert "socket_timeout=2" in options and "socket_timeout=0.25" not in options
    assert "socket_connect_timeout=0.25" in options
    assert online.get({"customer_id": 7}).missing == []  # the real Redis still answers
