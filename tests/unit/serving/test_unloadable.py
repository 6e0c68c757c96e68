"""A deployed model that cannot be loaded: 503 naming it and why, never "not deployed here".

The worker's other models keep serving; readiness says which model is broken
until a later generation fixes it (a loadable version, or undeploy).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from mlpipe.config import load_settings
from mlpipe.serving import (
    GenerationLoader,
    PredictRequest,
    ServingRuntime,
    serving_metrics,
)
from tests.unit.serving.test_pipeline import FakeControl, ListSink, fake_runtime, protocol

REASON = "IntegrityError: artifact of churn/9 hashes to abc…; refusing"


@pytest.fixture
def env(tmp_path: Path) -> Any:
    """``fraud`` loads; ``churn`` is deployed at generation 4, its version 9 tampered with."""
    control = FakeControl()
    control.set("fraud", 1, "1")
    control.tampered.add("9")
    control.set("churn", 4, "9")
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    yield built
    built.pipeline.close()


def _req(model: str) -> PredictRequest:
    return PredictRequest(
        model=model, entity={"customer_id": 3}, features={"amount": 5.0}, request_id=model
    )


def _call(rt: ServingRuntime, method: str, path: str, body: Any = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=protocol(rt))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.request(method, path, json=body)

    return asyncio.run(go())


def _infer_body() -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "customer_id", "shape": [1], "datatype": "INT64", "data": [3]},
            {"name": "amount", "shape": [1], "datatype": "FP64", "data": [5.0]},
        ]
    }


def test_readiness_names_the_model_and_why(env: Any) -> None:
    problem = env.rt.readiness_problem()
    assert problem == f"model 'churn' is deployed but cannot be loaded (generation 4): {REASON}"
    assert env.rt.ready  # warmed up: the models that load are served
    assert env.metrics.reloads.labels("churn", "refused")._value.get() == 1


def test_predict_for_it_is_503_with_the_reason_and_others_are_served(env: Any) -> None:
    broken, fine = env.pipeline.predict_batch([_req("churn"), _req("fraud")])
    assert broken["status"] == 503 and broken["field"] == "model"
    assert REASON in broken["error"] and "not deployed here" not in broken["error"]
    assert fine["model"] == "fraud" and fine["version"] == "1"
    assert [row.model for row in env.sink.rows] == ["fraud"]  # nothing logged for churn


def test_gateway_and_oip_answer_503_with_the_reason(env: Any) -> None:
    r = _call(env.rt, "POST", "/predict", _req("churn").model_dump(exclude_none=True))
    assert (r.status_code, r.json()["field"]) == (503, "model"), r.text
    assert REASON in r.json()["error"]
    for method, path, body in (
        ("POST", "/v2/models/churn/infer", _infer_body()),
        ("GET", "/v2/models/churn/ready", None),
        ("GET", "/v2/models/churn", None),
    ):
        r = _call(env.rt, method, path, body)
        assert r.status_code == 503, (path, r.text)
        assert REASON in r.json()["error"], path
    r = _call(env.rt, "GET", "/v2/health/ready")
    assert r.status_code == 503 and "churn" in r.json()["error"]
    assert _call(env.rt, "POST", "/v2/models/fraud/infer", _infer_body()).status_code == 200
    assert _call(env.rt, "POST", "/predict", _req("fraud").model_dump(exclude_none=True)).is_success
    assert [row.model for row in env.sink.rows] == ["fraud", "fraud"]


def test_a_later_loadable_generation_restores_readiness(env: Any) -> None:
    env.control.set("churn", 5, "2")
    env.loader.refresh()
    assert env.rt.readiness_problem() is None
    (answer,) = env.pipeline.predict_batch([_req("churn")])
    assert (answer["version"], answer["generation"]) == ("2", 5)
    assert _call(env.rt, "GET", "/v2/health/ready").json() == {"ready": True}


def test_undeploy_restores_readiness_and_the_model_is_unknown(env: Any) -> None:
    del env.control.records["churn"]
    env.loader.refresh()
    assert env.rt.readiness_problem() is None
    (answer,) = env.pipeline.predict_batch([_req("churn")])
    assert answer["status"] == 404 and "not deployed here" in answer["error"]


def test_a_refused_newer_generation_keeps_the_older_serving_and_ready(env: Any) -> None:
    """The swap waits for a verified load (DESIGN 3): the older generation answers, named."""
    env.control.set("fraud", 2, "9")
    env.loader.refresh()
    assert "churn" in (env.rt.readiness_problem() or "")
    assert "fraud" not in (env.rt.readiness_problem() or "")
    (answer,) = env.pipeline.predict_batch([_req("fraud")])
    assert (answer["version"], answer["generation"]) == ("1", 1)


def test_still_loading_is_its_own_reason(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    loader = GenerationLoader(settings, generations=lambda _s: {"fraud": 1})  # never polled
    rt = ServingRuntime(
        settings,
        loader=loader,
        sink=ListSink(),
        fetch_features=lambda _service, _entities: [],
        metrics=serving_metrics(CollectorRegistry()),
    )
    assert rt.readiness_problem() == "models still loading"
    rt.pipeline.close()
