"""The whole loop on the production profile's engines, on loopback.

register (MLflow tracking server, PostgreSQL backend, artifacts over HTTP) →
deploy canary (control plane on PostgreSQL) → serve (tenant buckets in Redis) →
promote → rollback → warehouse sync and drift report (warehouse on PostgreSQL).
Skips with the reason when PostgreSQL or Redis is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlpipe import demo, deployments, monitoring, registry, warehouse
from mlpipe.config import load_settings
from mlpipe.serving import ScoringProcess, free_port
from tests.conftest import train_toy_model
from tests.integration.prod_services import (
    REDIS_URL,
    mlflow_server,
    postgres_database,
    redis_client,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.redis, pytest.mark.e2e]


def _bodies(n: int, seed: int) -> list[dict]:  # type: ignore[type-arg]
    rng = np.random.default_rng(seed)
    return [
        {
            "model": "fraud",
            "entity": {"customer_id": int(seed * 100_000 + i)},
            "features": {
                "amount": float(rng.gamma(2.0, 30.0)),
                "txn_count_7d": int(rng.poisson(5)),
            },
        }
        for i in range(n)
    ]


def test_whole_loop_on_postgres_redis_and_an_mlflow_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with (
        redis_client(),
        mlflow_server(tmp_path) as server,
        postgres_database() as control,
        postgres_database() as store,
    ):
        (home / "mlpipe.toml").write_text(
            "[profile.prod]\n"
            f'registry_uri = "{server.url}"\n'
            'artifact_root = "mlflow-artifacts:/mlpipe"\n'
            f'control_url = "{control}"\n'
            f'warehouse_url = "{store}"\n'
            f'[profile.prod.security]\nredis_url = "{REDIS_URL}"\n'
        )
        monkeypatch.setenv("MLPIPE_HOME", str(home))
        monkeypatch.setenv("MLPIPE_PROFILE", "prod")
        settings = load_settings()
        for seed in (1, 2):
            model_path, data_path = train_toy_model(tmp_path / "inputs", seed=seed)
            registry.register(settings, "fraud", dataset=data_path, model_path=model_path)
        deployments.deploy(settings, "fraud", "1")
        canary = deployments.deploy(settings, "fraud", "2", canary=50)
        env = {"MLPIPE_SERVING__RELOAD_INTERVAL_S": "0.5"}
        with ScoringProcess(settings, port=free_port(), env=env) as scoring:
            seen = demo.send(scoring.url, _bodies(200, 1), concurrency=8)
            assert seen.ok == 200 and seen.generations == {canary.generation}, seen.errors
            assert seen.by_arm["canary"] > 40 and seen.by_arm["champion"] > 40
            promoted = deployments.promote(settings, "fraud", force=True)
            demo.wait_for_generation(scoring.url, _bodies(1, 9)[0], promoted.generation)
            after_promote = demo.send(scoring.url, _bodies(100, 2), concurrency=8)
            assert dict(after_promote.by_version) == {"2": 100}, after_promote.errors
            rolled = deployments.rollback(settings, "fraud")
            demo.wait_for_generation(scoring.url, _bodies(1, 9)[0], rolled.generation)
            after_rollback = demo.send(scoring.url, _bodies(100, 3), concurrency=8)
            assert dict(after_rollback.by_version) == {"1": 100}, after_rollback.errors
        synced = warehouse.sync(settings)
        assert synced.rows_loaded >= 400
        verdict = monitoring.drift(settings, "fraud", window="1h", sync_first=False)
        assert verdict.verdict in ("ok", "drift") and verdict.report_dir
        summary = json.loads((Path(verdict.report_dir) / "summary.json").read_text())
        assert {arm["version"] for arm in summary["arms"]} >= {"1"}
        assert (
            str(registry.client(settings).get_model_version_by_alias("fraud", "champion").version)
            == "1"
        )
