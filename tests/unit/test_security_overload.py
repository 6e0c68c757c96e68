"""The overload gate: fast 503 with Retry-After when not ready or over the in-flight bound."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mlpipe.serving.overload import OverloadGate, saturated


def _scope(path: str = "/predict") -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "POST", "headers": []}


def _ready() -> bool:
    return True


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

    heads: list[dict[bytes, bytes]] = []

    async def main() -> bool:
        gate = OverloadGate(app, max_inflight=2, ready=lambda: True)

        async def one() -> None:
            async def send(m: Any) -> None:
                if m["type"] == "http.response.start":
                    statuses.append(m["status"])
                    heads.append(dict(m["headers"]))

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
    # overloaded, not broken: the client keeps its connection (a reconnect costs CPU)
    assert heads[0][b"retry-after"] == b"1" and b"connection" not in heads[0]


def test_every_nth_admitted_answer_asks_the_client_to_reconnect() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x", b"1")]})
        await send({"type": "http.response.body", "body": b"{}"})

    def closes(reconnect_every: int) -> list[bool]:
        gate = OverloadGate(
            app, max_inflight=4, reconnect_every=reconnect_every, ready=lambda: True
        )
        seen: list[bool] = []

        async def send(m: Any) -> None:
            if m["type"] == "http.response.start":
                headers = dict(m["headers"])
                assert headers[b"x"] == b"1"  # the app's own headers are kept
                seen.append(headers.get(b"connection") == b"close")

        for _ in range(6):
            asyncio.run(gate(_scope(), _noop_receive, send))
        return seen

    assert closes(3) == [False, False, True, False, False, True]
    assert closes(0) == [False] * 6


def test_other_paths_pass() -> None:
    seen = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])

    gate = OverloadGate(app, max_inflight=1, ready=lambda: False)
    asyncio.run(gate(_scope("/readyz"), _noop_receive, None))  # type: ignore[arg-type]
    assert seen == ["/readyz"]
