"""The demo end to end under real traffic, then the same service with its feature store gone.

Uses Feast-backed models (the demo's fraud_v1 / fraud_v2), so it also covers
what the request-time-only e2e models cannot: online features, and defaults
when the online store disappears.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest

from mlpipe import demo
from mlpipe.config import load_settings
from mlpipe.serving import ScoringProcess, free_port
from tests.conftest import REPO

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("demo")
    shutil.copytree(
        REPO / "feature_repo", home / "feature_repo", ignore=shutil.ignore_patterns("data")
    )
    events: list[demo.DemoEvent] = []
    settings = load_settings(home=home)
    result = demo.run(settings, events.append, customers=60, days=4, requests_per_phase=80)
    return result, events


def test_demo_runs_the_loop_under_traffic_and_finds_the_drift(demo_run) -> None:  # type: ignore[no-untyped-def]
    result, events = demo_run
    by_title = {e.title: e for e in events}
    traffic = by_title["traffic seen by the client"].table
    assert traffic is not None
    columns, rows = traffic
    phases = {row[0]: dict(zip(columns, row, strict=True)) for row in rows}
    assert "canary=" in phases["before: promote v2"]["per arm"]
    assert phases["after rollback"]["versions"].startswith("v1=")
    assert all(p["ok"] > 0 for p in phases.values())
    [drift_event] = [e for e in events if e.title.startswith("drift report")]
    assert drift_event.title == "drift report: drift"
    assert Path(drift_event.detail, "summary.json").is_file()
    assert any("amount" in row[2] for row in drift_event.table[1])


def test_feature_store_gone_serves_defaults_and_counts_them(demo_run) -> None:  # type: ignore[no-untyped-def]
    result, _ = demo_run
    body = {"model": "fraud", "entity": {"customer_id": 7}, "features": {"amount": 42.0}}
    env = {"MLPIPE_SERVING__FEATURE_CACHE_TTL_S": "0"}
    with ScoringProcess(result, port=free_port(), env=env) as server:
        fresh = httpx.post(f"{server.url}/predict", json=body, timeout=30).json()
        assert fresh["features_missing"] == []
        (result.feature_repo_path / "data" / "online_store.db").unlink()
        body["entity"]["customer_id"] = 8
        degraded = httpx.post(f"{server.url}/predict", json=body, timeout=30)
        assert degraded.status_code == 200
        missing = degraded.json()["features_missing"]
        assert "txn_count_7d" in missing and "amount" not in missing
        metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
        assert 'mlpipe_features_missing_total{feature="txn_count_7d",model="fraud"}' in metrics
        # a few more failed reads open the breaker: defaults at once, without calling Feast
        for cid in range(9, 13):
            body["entity"]["customer_id"] = cid
            r = httpx.post(f"{server.url}/predict", json=body, timeout=30)
            assert r.status_code == 200 and "txn_count_7d" in r.json()["features_missing"]
        metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
        assert re.search(
            r'^mlpipe_feature_store_breaker_open\{service="\w+"\} 1\.0$', metrics, re.M
        )
