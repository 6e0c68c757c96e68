"""RequestIntake on its own: content types, size limits and the body deadline."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from mlpipe.serving import RequestIntake
from mlpipe.serving._context import context_of


class App:
    """The layer below: records what it was handed."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        self.received_ns = context_of(scope).received_ns
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def _call(
    chunks: list[bytes],
    headers: list[tuple[bytes, bytes]],
    *,
    delay_s: float = 0.0,
    path: str = "/predict",
    timeout_s: float = 1.0,
) -> tuple[int, dict[bytes, bytes], dict[str, Any] | None, App]:
    app = App()
    intake = RequestIntake(app, max_body_bytes=1024, timeout_s=timeout_s)
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    pending = list(chunks)
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(delay_s)
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(intake(scope, receive, send))
    body = json.loads(sent[1]["body"]) if sent[0]["status"] != 200 else None
    return sent[0]["status"], dict(sent[0]["headers"]), body, app


JSON = [(b"content-type", b"application/json")]


@pytest.mark.parametrize(
    "content_type",
    [b"application/vnd.bentoml+pickle", b"text/plain", b"application/x-www-form-urlencoded"],
)
def test_a_body_that_is_not_json_gets_415_and_reaches_nothing(content_type: bytes) -> None:
    status, _, body, app = _call([b"\x80\x04junk"], [(b"content-type", content_type)])
    assert status == 415 and app.bodies == []
    assert body == {
        "error": f"unsupported content type {content_type.decode()!r}: "
        "send the body as application/json",
        "status": 415,
    }


def test_a_second_content_type_line_cannot_smuggle_pickle() -> None:
    headers = [*JSON, (b"content-type", b"application/vnd.bentoml+pickle")]
    assert _call([b"{}"], headers)[0] == 415


@pytest.mark.parametrize(
    "headers",
    [
        [],
        JSON,
        [(b"content-type", b"application/json; charset=utf-8")],
        [(b"content-type", b"application/problem+json")],
    ],
)
def test_json_or_no_content_type_passes_whole(headers: list[tuple[bytes, bytes]]) -> None:
    before = time.time_ns()
    status, _, _, app = _call([b'{"a":', b" 1}"], headers)
    assert status == 200 and app.bodies == [b'{"a": 1}']
    assert before <= app.received_ns <= time.time_ns()  # the 504 clock starts at arrival


def test_binary_tensors_only_on_the_inference_protocol_with_its_header() -> None:
    binary = [(b"content-type", b"application/octet-stream")]
    header = [(b"inference-header-content-length", b"2")]
    assert _call([b"{}"], binary + header, path="/v2/models/fraud/infer")[0] == 200
    assert _call([b"{}"], binary, path="/v2/models/fraud/infer")[0] == 415
    assert _call([b"{}"], binary + header, path="/predict")[0] == 415


def test_over_the_limit_declared_or_delivered_gets_413() -> None:
    declared = [*JSON, (b"content-length", b"5000")]
    status, _, body, app = _call([b"{}"], declared)
    assert (status, body, app.bodies) == (413, {"error": "body over 1024 bytes", "status": 413}, [])
    status, _, _, app = _call([b"x" * 600, b"x" * 600], JSON)
    assert status == 413 and app.bodies == []


def test_a_body_slower_than_the_deadline_gets_408_and_connection_close() -> None:
    status, headers, body, app = _call([b"{", b'"a"', b":1}"], JSON, delay_s=0.15, timeout_s=0.3)
    assert status == 408 and headers[b"connection"] == b"close" and app.bodies == []
    assert body == {"error": "request body not received within 0.3 s", "status": 408}
    status, *_ = _call([b"{", b"}"], JSON, delay_s=0.05, timeout_s=0.3)  # in time: answered
    assert status == 200
