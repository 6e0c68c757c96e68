"""The issue-3 acceptance list against a real server on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import fire, predlog_rows, wait_generation

pytestmark = pytest.mark.e2e


def _body(
    cid: int, amount: float = 80.0, n_items: int = 3, rid: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "fraud",
        "entity": {"customer_id": cid},
        "features": {"amount": amount, "n_items": n_items},
    }
    if rid:
        body["request_id"] = rid
    return body


def test_health_and_contract(stack: Any) -> None:
    s = stack.server
    assert httpx.get(f"{s.url}/livez").status_code == 200
    assert httpx.get(f"{s.url}/readyz").status_code == 200
    r = s.post(_body(1, rid="hello-1"))
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["request_id"] == "hello-1"
    assert (data["model"], data["version"], data["arm"]) == ("fraud", stack.versions[1], "champion")
    assert data["generation"] == 1 and data["features_missing"] == []
    assert 0 <= data["score"] <= 1 and data["label"] in (0, 1)
    # serving.tracing is off by default: BentoML's tracing middleware made no span
    assert "x-bentoml-request-id" not in r.headers


def test_the_worker_runs_optimized_and_the_server_does_not(stack: Any) -> None:
    """The service's ``envs`` reach the worker, where typeguard (Feast's type checks) is a
    no-op (decision 038); the arbiter, and so any process that is not a worker, is not."""
    from mlpipe.serving._process_tree import descendants

    def optimize(pid: int) -> str | None:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        found = [v for v in environ if v.startswith(b"PYTHONOPTIMIZE=")]
        return found[0].decode().partition("=")[2] if found else None

    workers = [p.pid for p in descendants(stack.server.pid)]
    assert workers and {optimize(pid) for pid in workers} == {"1"}
    assert optimize(stack.server.pid) is None


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (
            json.dumps(
                {"model": "fraud", "entity": {"customer_id": 1}, "features": {"amount": "a"}}
            ),
            422,
        ),
        (json.dumps({"model": "fraud", "entity": {"customer_id": 1.5}}), 422),
        # a boolean for a number (an entity is optional here: this model reads no features)
        (json.dumps({"model": "fraud", "features": {"amount": True}}), 422),
        (json.dumps({"model": "nope", "entity": {"customer_id": 1}}), 404),
        ('{"model": "fraud", "entity": {', 400),
        ("[]", 422),
        ("", 400),
        (
            json.dumps({"model": "fraud", "entity": {"customer_id": 1}, "features": {"amount": 1}}),
            422,
        ),
        ("x" * 10_000_000, 413),
    ],
)
def test_bad_requests_get_4xx_and_no_log_row(stack: Any, content: str, status: int) -> None:
    before = len(predlog_rows(stack.settings))
    r = httpx.post(
        f"{stack.server.url}/predict",
        content=content,
        timeout=30,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == status, r.text
    assert r.json()["error"]
    time.sleep(0.2)
    assert len(predlog_rows(stack.settings)) == before


def test_no_mixup_in_concurrent_batches(stack: Any) -> None:
    rng = np.random.default_rng(7)
    amounts = rng.gamma(2, 50, 2000).round(3)
    items = rng.integers(1, 9, 2000)
    bodies = [
        _body(100_000 + i, float(amounts[i]), int(items[i]), rid=f"mix-{i}") for i in range(2000)
    ]
    responses = fire(stack.server.url, bodies, concurrency=32)
    assert all(r.status_code == 200 for r in responses), {r.status_code for r in responses}
    x = np.column_stack([amounts, items]).astype(float)
    expected = stack.models[stack.versions[1]].predict_scores(x)
    for i, r in enumerate(responses):
        data = r.json()
        assert data["request_id"] == f"mix-{i}"
        assert data["score"] == pytest.approx(float(expected[i]), rel=1e-9)
    logged = {row.request_id for row in predlog_rows(stack.settings)}
    assert {f"mix-{i}" for i in range(2000)} <= logged
    metrics = httpx.get(f"{stack.server.url}/metrics").text
    assert "mlpipe_predictions_total" in metrics and "mlpipe_request_latency_seconds" in metrics
    assert "bentoml_service_request" in metrics or "bentoml_" in metrics


def _series(url: str, name: str, **labels: str) -> float:
    """The sum over the workers of one series in ``/metrics`` with these labels (0 if none)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def test_bentomls_traffic_series_count_every_answer_by_route_and_status(stack: Any) -> None:
    """RouteMetrics records BentoML's own series (decision 041): each answer counted once,
    under its route's template and status, its duration observed, none left in progress."""
    url, ns = stack.server.url, "bentoml_service_request"
    ok = {"endpoint": "/predict", "http_response_code": "200"}
    bad = {"endpoint": "/predict", "http_response_code": "422"}
    before = [
        _series(url, f"{ns}_total", **ok),
        _series(url, f"{ns}_duration_seconds_count", **ok),
        _series(url, f"{ns}_total", **bad),
    ]
    answers = fire(url, [_body(7, 10.0 + i, 3, rid=f"series-{i}") for i in range(40)], 8)
    assert all(r.status_code == 200 for r in answers)
    refused = httpx.post(f"{url}/predict", json={"model": "fraud", "features": {"amount": "x"}})
    assert refused.status_code == 422
    after = [
        _series(url, f"{ns}_total", **ok),
        _series(url, f"{ns}_duration_seconds_count", **ok),
        _series(url, f"{ns}_total", **bad),
    ]
    assert [a - b for a, b in zip(after, before, strict=True)] == [40, 40, 1]
    assert _series(url, f"{ns}_in_progress", endpoint="/predict") == 0
    assert _series(url, f"{ns}_total", endpoint="/metrics") == 0  # scrapes are not counted


def test_canary_share_sticky_and_monotonic(stack: Any) -> None:
    from mlpipe import deployments

    d = deployments.deploy(stack.settings, "fraud", stack.versions[2], canary=20)
    wait_generation(stack.server, d.generation)
    bodies = [_body(i % 500, amount=float(i % 13)) for i in range(2000)]
    responses = fire(stack.server.url, bodies)
    arms: dict[int, set[str]] = defaultdict(set)
    for b, r in zip(bodies, responses, strict=True):
        assert r.status_code == 200
        arms[b["entity"]["customer_id"]].add(r.json()["arm"])
    assert all(len(a) == 1 for a in arms.values())
    share = sum(r.json()["arm"] == "canary" for r in responses) / len(responses) * 100
    assert 17 <= share <= 23, share
    on_canary = {cid for cid, a in arms.items() if a == {"canary"}}

    d = deployments.deploy(stack.settings, "fraud", stack.versions[2], canary=40)
    wait_generation(stack.server, d.generation)
    responses = fire(stack.server.url, [_body(cid) for cid in range(500)])
    now_canary = {cid for cid, r in enumerate(responses) if r.json()["arm"] == "canary"}
    assert on_canary <= now_canary and len(now_canary) > len(on_canary)
    canary_versions = {r.json()["version"] for r in responses if r.json()["arm"] == "canary"}
    assert canary_versions == {stack.versions[2]}


def test_shadow_rows_logged_never_returned(stack: Any) -> None:
    from mlpipe import deployments

    d = deployments.deploy(stack.settings, "fraud", stack.versions[3], shadow=100)
    wait_generation(stack.server, d.generation)
    bodies = [_body(200_000 + i, rid=f"shadow-{i}") for i in range(200)]
    responses = fire(stack.server.url, bodies)
    assert all(r.status_code == 200 for r in responses)
    assert stack.versions[3] not in {r.json()["version"] for r in responses}
    assert {r.json()["arm"] for r in responses} <= {"champion", "canary"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        shadow = {
            r.request_id: r.version
            for r in predlog_rows(stack.settings)
            if r.arm == "shadow" and r.request_id.startswith("shadow-")
        }
        if len(shadow) == 200:
            break
        time.sleep(0.3)
    assert len(shadow) == 200 and set(shadow.values()) == {stack.versions[3]}


def test_cache_hit_then_miss_after_promote(stack: Any) -> None:
    from mlpipe import deployments

    body = _body(777, amount=42.0, n_items=2)
    first, second = stack.server.post(body).json(), stack.server.post(body).json()
    assert (first["cache_hit"], second["cache_hit"]) == (False, True)
    assert first["score"] == second["score"]
    d = deployments.promote(stack.settings, "fraud", force=True)
    wait_generation(stack.server, d.generation)
    third = stack.server.post(body).json()
    assert third["generation"] == d.generation and third["cache_hit"] is False


def test_promote_and_rollback_under_load(stack: Any) -> None:
    from mlpipe import deployments

    allowed = {d.champion for d in [deployments.current(stack.settings, "fraud")]}
    stop = threading.Event()
    results: list[httpx.Response] = []

    def load() -> None:
        while not stop.is_set():
            results.extend(fire(stack.server.url, [_body(i) for i in range(64)], concurrency=16))

    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(1)
        d = deployments.rollback(stack.settings, "fraud")
        allowed |= set(d.arms().values())
        time.sleep(1.5)
        d = deployments.deploy(stack.settings, "fraud", stack.versions[2], canary=50)
        allowed |= set(d.arms().values())
        time.sleep(1.5)
        d = deployments.promote(stack.settings, "fraud", force=True)
        allowed |= set(d.arms().values())
        time.sleep(1.5)
    finally:
        stop.set()
        t.join()
    assert results and all(r.status_code == 200 for r in results), {r.status_code for r in results}
    assert {r.json()["version"] for r in results} <= allowed


def test_tampered_artifact_is_refused(stack: Any) -> None:
    from mlpipe import deployments

    before = stack.server.post(_body(5)).json()
    stack.tampered_artifact.write_bytes(stack.tampered_artifact.read_bytes() + b"tampered")
    d = deployments.deploy(stack.settings, "fraud", stack.tampered_version)
    deadline = time.monotonic() + 15
    while "refused generation" not in stack.server.log() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert f"refused generation {d.generation} of fraud: IntegrityError" in stack.server.log()
    after = stack.server.post(_body(5)).json()
    assert after["generation"] == before["generation"]
    assert after["version"] != stack.tampered_version
