"""The overload gate: fast 503 with Retry-After when not ready or over the in-flight bound."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mlpipe.serving.overload import OverloadGate, saturated


def _scope(path: str = "/predict") -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "POST", "headers": []}


async def _noop_receive() -> Any:
    return {"type": "http.request", "body": b"", "more_body": False}


def test_not_ready_gets_503_with_retry_after_and_connection_close() -> None:
    sent: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
        raise AssertionError("must not be called")

    async def send(m: Any) -> None:
        sent.append(m)

    gate = OverloadGate(app, max_inflight=2, retry_after_s=3, ready=lambda: False)
    asyncio.run(gate(_scope(), _noop_receive, send))
    headers = dict(sent[0]["headers"])
    assert sent[0]["status"] == 503
    assert headers[b"retry-after"] == b"3" and headers[b"connection"] == b"close"
    assert json.loads(sent[1]["body"])["status"] == 503


def test_beyond_max_inflight_gets_503_and_saturation_shows() -> None:
    release = asyncio.Event()
    statuses: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def main() -> bool:
        gate = OverloadGate(app, max_inflight=2, ready=lambda: True)

        async def one() -> None:
            async def send(m: Any) -> None:
                if m["type"] == "http.response.start":
                    statuses.append(m["status"])

            await gate(_scope(), _noop_receive, send)

        tasks = [asyncio.create_task(one()) for _ in range(2)]
        await asyncio.sleep(0.01)
        full = saturated()
        await one()  # the third is refused at once
        release.set()
        await asyncio.gather(*tasks)
        return full

    assert asyncio.run(main()) is True
    assert statuses == [503, 200, 200]
    assert not saturated()


def test_other_paths_pass() -> None:
    seen = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])

    gate = OverloadGate(app, max_inflight=1, ready=lambda: False)
    asyncio.run(gate(_scope("/readyz"), _noop_receive, None))  # type: ignore[arg-type]
    assert seen == ["/readyz"]
