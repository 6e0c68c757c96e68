"""The Open Inference Protocol layer over a real runtime (fake models, store and log).

An infer request is scored as one batch, all or nothing, and costs its tenant a
token per row; the layer is driven through ASGI as the stack drives it, with a
stand-in for the auth layer that takes the arrival token and names the tenant.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlpipe.config import load_settings
from mlpipe.security import LocalBuckets
from mlpipe.serving._context import Caller, context_of
from tests.unit.serving.test_pipeline import CURSED_AMOUNT, ListSink, fake_runtime, protocol

RATE = 0.001  # tokens/s: none come back during a test


@pytest.fixture
def env(tmp_path: Path) -> Any:
    built = fake_runtime(load_settings(home=tmp_path), ListSink())
    yield built
    built.pipeline.close()


def _with_tenant(app: Any, buckets: LocalBuckets, burst: int) -> Any:
    """What the auth layer does for a tenant: the arrival token, then the context's caller."""

    async def auth(scope: Any, receive: Any, send: Any) -> None:
        if buckets.take("acme", RATE, burst) > 0:
            await send({"type": "http.response.start", "status": 429, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": "429"}'})
            return

        def charge(cost: float, *, paid: float = 0.0) -> float:
            return buckets.take("acme", RATE, burst, cost, paid)

        context_of(scope).caller = Caller("acme", charge=charge)
        await app(scope, receive, send)

    return auth


def _infer(app: Any, amounts: list[float], request_id: str | None = None) -> httpx.Response:
    body: dict[str, Any] = {
        "inputs": [
            {
                "name": "customer_id",
                "datatype": "INT64",
                "shape": [len(amounts)],
                "data": list(range(len(amounts))),
            },
            {"name": "amount", "datatype": "FP64", "shape": [len(amounts)], "data": amounts},
        ]
    }
    if request_id is not None:
        body["id"] = request_id

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post("/v2/models/fraud/infer", content=json.dumps(body))

    return asyncio.run(go())


def test_a_request_of_many_rows_is_one_batch(env: Any) -> None:
    r = _infer(protocol(env.rt), [5.0] * 100, "big")
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["shape"] == [100]
    assert [row.request_id for row in env.sink.rows] == [f"big-{i}" for i in range(100)]
    assert env.pipeline.metrics.batch_size._sum.get() == 100  # one batch of 100


def test_one_row_the_model_rejects_fails_the_request_and_logs_nothing(env: Any) -> None:
    r = _infer(protocol(env.rt), [5.0, CURSED_AMOUNT, 7.0])
    assert r.status_code == 422, r.text
    assert "not a real amount" in r.json()["error"]
    assert env.sink.rows == []


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\x9b"])
def test_a_control_character_in_the_id_is_400(env: Any, char: str) -> None:
    r = _infer(protocol(env.rt), [5.0, 6.0], f"id{char}")
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("id: control character U+")
    assert env.sink.rows == []


def test_an_out_of_range_key_in_any_row_is_422_before_anything_is_scored(env: Any) -> None:
    body = {
        "inputs": [
            {"name": "customer_id", "datatype": "UINT64", "shape": [2], "data": [1, 2**63]},
            {"name": "amount", "datatype": "FP64", "shape": [2], "data": [1.0, 2.0]},
        ]
    }

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=protocol(env.rt))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post("/v2/models/fraud/infer", content=json.dumps(body))

    r = asyncio.run(go())
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "entity.customer_id", r.json()
    assert env.feats.calls == [] and env.sink.rows == []


def test_each_row_costs_a_token(env: Any) -> None:
    buckets = LocalBuckets()
    app = _with_tenant(protocol(env.rt), buckets, burst=10)
    assert _infer(app, [5.0] * 6).status_code == 200  # 10 - 6 = 4 left
    refused = _infer(app, [5.0] * 5)  # 1 on arrival, 4 more wanted, 3 there
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == str(int(1 / RATE))  # a whole token short
    assert "5 rows cost 5 tokens" in refused.json()["error"]
    assert len(env.sink.rows) == 6  # the refused request logged nothing
    assert _infer(app, [5.0] * 3).status_code == 200  # the 3 left
    assert len(env.sink.rows) == 9


def test_more_rows_than_the_burst_can_never_pass(env: Any) -> None:
    app = _with_tenant(protocol(env.rt), LocalBuckets(), burst=10)
    r = _infer(app, [5.0] * 11)
    assert r.status_code == 429, r.text
    assert "more than its burst holds" in r.json()["error"]
    assert "retry-after" not in r.headers
    assert env.sink.rows == []
