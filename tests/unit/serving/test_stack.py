"""The request stack as the service builds it: its layers, their order, where a 413 comes from."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlpipe.config import load_settings
from mlpipe.serving import (
    Admission,
    AuthGateway,
    FrontDoor,
    InferenceProtocol,
    Keys,
    OverloadGate,
    PredictGateway,
    PredictRequest,
    ReadinessGate,
    RequestIntake,
    RouteTraffic,
    RuntimeSlot,
    front_door,
    predict_lane,
    request_stack,
)


class Bottom:
    """BentoML's app below the stack: records what reached it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _no_batch(reqs: Sequence[PredictRequest]) -> list[Any]:  # pragma: no cover
    raise AssertionError("nothing may reach the batcher")


def _built(tmp_path: Path, bottom: Bottom) -> Any:
    """The service's stack around ``bottom``, as BentoML builds it (first added outermost)."""
    settings = load_settings(home=tmp_path, security={"auth": "off"})
    admission = Admission(settings.reliability.max_inflight)
    app: Any = bottom
    runtime = RuntimeSlot()
    layers = request_stack(
        settings, admission=admission, batch=_no_batch, runtime=runtime, ready=lambda: True
    )
    for cls, kwargs in reversed(layers):
        app = cls(app, **kwargs)
    cls, kwargs = front_door(settings, admission, runtime)
    return cls(app, **kwargs)


def test_the_layers_and_their_order(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    admission = Admission(2)
    runtime = RuntimeSlot()
    layers = request_stack(settings, admission=admission, batch=_no_batch, runtime=runtime)
    assert [cls for cls, _ in layers] == [
        AuthGateway,
        ReadinessGate,
        RequestIntake,
        InferenceProtocol,
        OverloadGate,
        PredictGateway,
    ]
    gate = dict(layers)[OverloadGate]
    door = front_door(settings, admission, runtime)
    assert door.cls is FrontDoor and door.kwargs["admission"] is gate["admission"] is admission
    # every layer finds the runtime in the one slot the service fills
    assert all(kwargs.get("runtime") is runtime for _, kwargs in [*layers[1:], door])
    # span headers only when tracing is on
    assert dict(layers)[PredictGateway]["response_headers"] is None


@pytest.mark.parametrize("path", ["/predict", "/v2/models/fraud/infer"])
def test_the_intake_refuses_an_oversized_body_above_both_scoring_routes(
    tmp_path: Path, path: str
) -> None:
    bottom = Bottom()
    app = _built(tmp_path, bottom)

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post(
                path, content=b"x" * (64 * 1024 + 1), headers={"content-type": "application/json"}
            )

    resp = asyncio.run(post())
    assert resp.status_code == 413
    assert resp.json() == {"error": f"body over {64 * 1024} bytes", "status": 413}
    assert bottom.paths == []


@pytest.mark.parametrize(
    ("serving", "laned"),
    [({}, True), ({"lane": False}, False), ({"tracing": True}, False)],
    ids=["default", "lane-off", "tracing"],
)
def test_the_predict_lane_is_on_unless_switched_off_or_tracing(
    tmp_path: Path, serving: dict[str, Any], laned: bool
) -> None:
    settings = load_settings(home=tmp_path, serving=serving, security={"auth": "off"})
    admission, runtime = Admission(2), RuntimeSlot()
    keys = Keys(settings)
    lane = predict_lane(
        settings, admission=admission, runtime=runtime, keys=keys, traffic=RouteTraffic()
    )
    assert (lane is not None) is laned
    if lane is not None:  # on the stack's own admission, runtime and keys
        assert (lane.admission, lane.runtime, lane.keys) == (admission, runtime, keys)
        assert lane.window == settings.serving.max_batch_size
