"""The last-resort deadline that stands in for BentoML's TimeoutMiddleware."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import weakref

import pytest
import uvloop
from bentoml._internal.server.http.traffic import TimeoutMiddleware

from mlpipe.serving import Deadline

_REQUEST_STATE: contextvars.ContextVar[object] = contextvars.ContextVar("request_state")


class _State:
    """Stands for what a request's context holds (BentoML puts its tracing span there)."""


async def _call(app, path: str = "/predict") -> tuple[int | None, bytes]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "path": path, "headers": []}, receive, send)
    status = next((m["status"] for m in sent if m["type"] == "http.response.start"), None)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def _app(*, before_start: float = 0.0, before_body: float = 0.0, raises: bool = False):
    async def app(scope, receive, send):
        await asyncio.sleep(before_start)
        if raises:
            raise TimeoutError("the app's own timeout")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(before_body)
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    return app


def test_a_request_that_has_not_started_its_answer_in_time_gets_504():
    status, body = asyncio.run(_call(Deadline(_app(before_start=5), timeout=0.05)))
    assert status == 504
    assert json.loads(body) == {
        "error": "Not able to process the request in 0.05 seconds",
        "status": 504,
    }


def test_an_answer_that_has_begun_is_not_cut_off():
    status, body = asyncio.run(_call(Deadline(_app(before_body=0.2), timeout=0.05)))
    assert (status, body) == (200, b"ok")


def test_the_apps_own_timeout_error_is_not_turned_into_a_504():
    with pytest.raises(TimeoutError, match="own timeout"):
        asyncio.run(_call(Deadline(_app(raises=True), timeout=5)))


def _left_alive_after_request(middleware: type) -> bool:
    """Whether the request's context outlives a request that finished long before its timeout."""

    async def run() -> bool:
        state = _State()
        alive = weakref.ref(state)
        _REQUEST_STATE.set(state)
        await _call(middleware(_app(), timeout=60))
        _REQUEST_STATE.set(None)
        del state
        gc.collect()
        return alive() is not None

    loop = uvloop.new_event_loop()  # the server's loop (uvicorn runs on uvloop)
    try:
        return loop.run_until_complete(loop.create_task(run(), context=contextvars.Context()))
    finally:
        loop.close()


def test_a_finished_request_leaves_nothing_behind():
    assert not _left_alive_after_request(Deadline)


def test_bentomls_timeout_middleware_keeps_the_request_context_until_its_timer_fires():
    # Why Deadline replaces it (decision 006): if a BentoML upgrade fixes this, this test
    # fails and the substitution (ScoringAppFactory, in serving/_bentoml_private.py) can go.
    assert _left_alive_after_request(TimeoutMiddleware)
