"""Issue 21 item 2: a deployed model the server cannot load is reported, not hidden.

A real server serves ``fraud``. ``churn`` is then deployed at a version whose
stored artifact was altered after registration, so the registry's sha256 check
refuses it (a corrupt artifact, as a bad copy or disk leaves one). The server
must say so: ``/readyz`` 503 naming ``churn`` and the reason, ``/predict`` and
the Open Inference Protocol for ``churn`` 503 with the reason (not 404 "not
deployed here"), ``fraud`` still answered. A later generation with a loadable
version makes it ready again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, _skops_files, _train, deploy_one, predlog_rows

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """``fraud`` deployed and served; ``churn`` registered twice, deployed later by the test."""
    from mlpipe import registry
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("mlpipe-home")
    settings = load_settings(home=home)
    deploy_one(settings, None)  # it registers more
    churn = {}
    for seed in (2, 3):
        before = _skops_files(home)
        data = _train(home, seed)
        info = registry.register(
            settings, "churn", dataset=data, model_path=home / f"model{seed}.joblib"
        )
        (artifact,) = _skops_files(home) - before
        churn[seed] = SimpleNamespace(version=info.version, artifact=artifact)
    server = Server(home, settings)
    try:
        server.start()
        yield SimpleNamespace(settings=settings, server=server, churn=churn)
    finally:
        server.stop()


def _body(model: str) -> dict[str, Any]:
    return {"model": model, "entity": {"customer_id": 7}, "features": {"amount": 80, "n_items": 3}}


def _infer_body() -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "customer_id", "shape": [1], "datatype": "INT64", "data": [7]},
            {"name": "amount", "shape": [1], "datatype": "FP64", "data": [80.0]},
            {"name": "n_items", "shape": [1], "datatype": "FP64", "data": [3.0]},
        ]
    }


def _wait_readyz(server: Server, status: int, timeout: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(f"{server.url}/readyz", timeout=5)
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.3)


def test_an_unloadable_model_is_reported_until_a_loadable_generation(served: Any) -> None:
    from mlpipe import deployments

    s, bad, good = served.server, served.churn[2], served.churn[3]
    bad.artifact.write_bytes(bad.artifact.read_bytes() + b"corrupt")
    deployments.deploy(served.settings, "churn", bad.version)

    ready = _wait_readyz(s, 503)
    assert ready.status_code == 503, f"{ready.text}\n{s.log()[-2000:]}"
    assert ready.text.startswith(
        "not ready: model 'churn' is deployed but cannot be loaded (generation 1): "
        f"IntegrityError: artifact of churn/{bad.version} hashes to "
    ), ready.text
    assert ready.headers["content-type"].startswith("text/plain")
    r = s.post(_body("churn"))
    assert r.status_code == 503, r.text
    assert "IntegrityError" in r.json()["error"] and r.json()["field"] == "model"
    for method, path in (("POST", "/infer"), ("GET", "/ready")):
        body = _infer_body() if method == "POST" else None
        r = httpx.request(method, f"{s.url}/v2/models/churn{path}", json=body, timeout=30)
        assert r.status_code == 503 and "IntegrityError" in r.json()["error"], (path, r.text)
    assert httpx.get(f"{s.url}/v2/health/ready", timeout=5).status_code == 503
    fraud = s.post(_body("fraud"))
    assert fraud.status_code == 200, fraud.text
    metrics = httpx.get(f"{s.url}/metrics", timeout=5).text
    assert 'mlpipe_generation_loads_total{model="churn",result="refused"}' in metrics

    deployments.deploy(served.settings, "churn", good.version)
    assert _wait_readyz(s, 200).status_code == 200, s.log()[-2000:]
    r = s.post(_body("churn"))
    assert r.status_code == 200 and r.json()["version"] == good.version, r.text
    assert httpx.get(f"{s.url}/v2/health/ready", timeout=5).status_code == 200
    time.sleep(0.3)  # the log's fsync interval is 0.1 s
    rows = [(row.model, row.version) for row in predlog_rows(served.settings)]
    assert ("churn", bad.version) not in rows and ("churn", good.version) in rows
