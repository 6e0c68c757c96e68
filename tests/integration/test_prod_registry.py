"""The prod profile's registry: an MLflow tracking server on loopback, PostgreSQL behind it.

mlpipe talks to the server over HTTP only: the registry URI is ``http://…`` and
the artifact root ``mlflow-artifacts:/…``, so runs, model files and the training
reference go through the server's artifact proxy; nothing is written under the
project home. The control plane is a second fresh PostgreSQL database. One
server serves the whole module (it takes ~20 s to migrate its database).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlpipe import deployments, registry
from mlpipe.config import Settings, load_settings
from tests.conftest import MLPIPE, train_toy_model
from tests.integration.prod_services import mlflow_server, postgres_database

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ALIASES = ("champion", "canary", "shadow", "previous")


@dataclass(frozen=True)
class Prod:
    home: Path
    settings: Settings
    env: dict[str, str]


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prod]:
    """A home whose ``prod`` profile names the MLflow server and a PostgreSQL control plane."""
    tmp = tmp_path_factory.mktemp("prod-registry")
    home = tmp / "home"
    home.mkdir()
    with mlflow_server(tmp) as server, postgres_database() as control:
        (home / "mlpipe.toml").write_text(
            "[profile.prod]\n"
            f'registry_uri = "{server.url}"\n'
            'artifact_root = "mlflow-artifacts:/mlpipe"\n'
            f'control_url = "{control}"\n'
        )
        env = {"MLPIPE_HOME": str(home), "MLPIPE_CONFIG": str(home / "mlpipe.toml")}
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            mp.setenv("MLPIPE_PROFILE", "prod")  # restored on exit, unlike load_settings(profile=)
            settings = load_settings()
            for seed in (1, 2):
                model_path, data_path = train_toy_model(tmp / "inputs", seed=seed)
                registry.register(
                    settings,
                    "fraud",
                    dataset=data_path,
                    model_path=model_path,
                    metrics={"auc": 0.9},
                )
        yield Prod(home=home, settings=settings, env=env)


def _aliases(settings: Settings) -> dict[str, str | None]:
    from mlflow.exceptions import MlflowException

    client = registry.client(settings)
    found: dict[str, str | None] = {}
    for alias in ALIASES:
        try:
            found[alias] = str(client.get_model_version_by_alias("fraud", alias).version)
        except MlflowException:
            found[alias] = None
    return found


def test_registered_over_http_with_lineage_and_verified_load(prod: Prod) -> None:
    s = prod.settings
    assert s.registry.startswith("http://127.0.0.1:") and s.control.startswith("postgresql+")
    info = registry.show(s, "fraud/2")
    assert {"mlpipe.data_sha256", "mlpipe.artifact_sha256", "mlpipe.features"} <= set(info.tags)
    loaded = registry.load_verified(s, "fraud", "2")  # downloaded through the artifact proxy
    assert loaded.artifact_sha256 == info.tags["mlpipe.artifact_sha256"]
    assert loaded.features == ["amount", "txn_count_7d"]
    assert registry.load_reference(s, "fraud", "1").shape[0] == 600
    assert not (prod.home / ".mlpipe").exists()  # nothing local: HTTP and PostgreSQL only


def test_deploy_canary_promote_rollback_mirror_aliases_on_the_server(prod: Prod) -> None:
    s = prod.settings
    deployments.deploy(s, "fraud", "1", reason="first")
    deployments.deploy(s, "fraud", "2", canary=10)
    assert _aliases(s) == {"champion": "1", "canary": "2", "shadow": None, "previous": None}
    promoted = deployments.promote(s, "fraud", force=True)
    assert (promoted.generation, promoted.champion, promoted.previous) == (3, "2", "1")
    assert _aliases(s) == {"champion": "2", "canary": None, "shadow": None, "previous": "1"}
    rolled = deployments.rollback(s, "fraud", reason="bad p99")
    assert (rolled.generation, rolled.champion) == (4, "1")
    assert _aliases(s) == {"champion": "1", "canary": None, "shadow": None, "previous": None}
    actions = [h.action for h in deployments.history(s, "fraud")]
    assert actions == ["rollback", "promote --force", "canary", "deploy"]


def _cli(prod: Prod, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [MLPIPE, "--profile", "prod", *args],
        cwd=prod.home,
        env={**os.environ, **prod.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_cli_promote_exactly_one_wins(prod: Prod) -> None:
    """Two ``mlpipe promote --expect-generation G`` processes race; one commits, one conflicts."""
    s = prod.settings
    before = deployments.current(s, "fraud")
    generation = before.generation if before else 0
    if before is None or before.champion is None:
        deployments.deploy(s, "fraud", "1")
        generation += 1
    canary = deployments.deploy(s, "fraud", "2", canary=50, expected_generation=generation)
    racers = [
        _cli(prod, "promote", "fraud", "--force", "--expect-generation", str(canary.generation))
        for _ in range(2)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in racers]
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0, 1], results  # 1 = Conflict
    loser_err = next(err for rc, _, err in results if rc == 1)
    assert "generation" in loser_err and "nothing was changed" in loser_err
    after = deployments.status(s, "fraud")
    assert (after.generation, after.champion, after.canary) == (canary.generation + 1, "2", None)
    assert deployments.history(s, "fraud", limit=1)[0].action == "promote --force"
    assert _aliases(s)["champion"] == "2"
    status = subprocess.run(
        [MLPIPE, "--profile", "prod", "status", "fraud", "--json"],
        cwd=prod.home,
        env={**os.environ, **prod.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["generation"] == after.generation
