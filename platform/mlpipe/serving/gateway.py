"""The gateway: pure-ASGI middleware in front of BentoML's batchable ``/predict``.

BentoML's adaptive batcher merges requests whose bodies are JSON *lists*. The
``/predict`` contract takes one object and returns one object, so this layer,
per request and before the request joins a batch:

- refuses a body over ``max_body_bytes`` (413) and malformed JSON (400);
- validates it (pydantic; 422 naming the field), checks the model is served
  here (404) and that the inputs it needs are there (422);
- sets ``request_id`` (if absent), ``received_ns`` (when the intake saw the
  request arrive, else now), ``tenant`` and ``pin``;
- forwards ``[request]`` and unwraps the one-element answer, giving an error
  item its own status.

Every error body is ``{"error": ..., "status": ..., "field": ...}``; statuses
come from :mod:`mlpipe.errors` in :func:`mlpipe.serving.pipeline.error_for`, the
one place that maps them. A rejected request never reaches the pipeline, so it
leaves no log row.

BentoML's OpenAPI document (``/docs.json``) describes the batch it sees, a list
of requests; the gateway rewrites the ``/predict`` operation in it to the
one-object contract clients actually use, and adds the Open Inference Protocol
routes (:func:`mlpipe.serving.oip_schema.openapi`), which BentoML never sees, so
clients and fuzzers generated from the document send what the service accepts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from mlpipe.errors import MlpipeError
from mlpipe.serving import oip_schema
from mlpipe.serving import runtime as _runtime
from mlpipe.serving.asgi import (
    ASGIApp,
    ClientDisconnected,
    Message,
    Receive,
    Scope,
    Send,
    read_body,
    send_json,
)
from mlpipe.serving.pipeline import error_for, new_request_id
from mlpipe.serving.schema import (
    PredictRequest,
    PredictResponse,
    describe_validation_error,
    error_body,
)

_JSON = [(b"content-type", b"application/json")]
_DOCS = "/docs.json"
_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "status"],
    "properties": {
        "error": {"type": "string"},
        "status": {"type": "integer"},
        "field": {"type": "string"},
        "request_id": {"type": "string"},
    },
}
_ERRORS = {
    "400": "Malformed JSON",
    "401": "Missing or invalid API key",
    "404": "Model not deployed here",
    "408": "Body not received within serving.request_timeout_s (Connection: close)",
    "413": "Body over the limit",
    "415": "Body not JSON (Content-Type other than application/json)",
    "422": "Invalid request, or an input the model rejects",
    "429": "Tenant over its rate limit (Retry-After)",
    "500": "The model failed on this request",
    "503": "Not ready or overloaded (Retry-After)",
}


class PredictGateway:
    """Wraps the BentoML app; only ``POST {path}`` is touched."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, path: str = "/predict") -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == _DOCS and scope["method"] == "GET":
            await self._docs(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        rt = _runtime.current()
        started = time.perf_counter()
        try:
            body = await read_body(scope, receive, self.max_body_bytes)
        except ClientDisconnected:
            return  # nobody to answer
        if body is None:
            limit = self.max_body_bytes
            await self._reply(send, rt, error_body(f"body over {limit} bytes", 413))
            return
        try:
            req = PredictRequest.model_validate_json(body)
        except ValidationError as exc:
            field, message = describe_validation_error(exc)
            if exc.errors()[0]["type"] == "json_invalid":
                await self._reply(send, rt, error_body(f"malformed JSON: {message}", 400))
            else:
                await self._reply(send, rt, error_body(message, 422, field))
            return
        if rt is None or not rt.ready:
            await self._reply(send, rt, error_body("not ready: models still loading", 503))
            return
        try:
            rt.pipeline.check(req)
        except MlpipeError as exc:
            await self._reply(send, rt, error_for(exc))
            return
        state = scope.get("state") or {}
        req = req.model_copy(
            update={
                "request_id": req.request_id or new_request_id(),
                "received_ns": state.get("received_ns") or time.time_ns(),
                "tenant": state.get("tenant", "default"),
                "pin": state.get("pin"),
            }
        )
        await self._forward(scope, send, rt, req, started)

    async def _forward(
        self, scope: Scope, send: Send, rt: Any, req: PredictRequest, started: float
    ) -> None:
        payload = b"[" + req.model_dump_json().encode() + b"]"
        headers = [
            (k, v) for k, v in scope["headers"] if k not in (b"content-length", b"content-type")
        ]
        headers += [*_JSON, (b"content-length", str(len(payload)).encode())]
        inner_scope = {**scope, "headers": headers}
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}

        async def finish(start: Message, body: bytes) -> None:
            await self._unwrap(send, rt, req, start, body, started)

        await self.app(inner_scope, receive, _buffered(send, finish))

    async def _unwrap(
        self, send: Send, rt: Any, req: PredictRequest, start: Message, body: bytes, started: float
    ) -> None:
        status = start.get("status", 500)
        if status == 200 and body.startswith(b"[") and body.endswith(b"]"):
            body = body[1:-1]
            if body.startswith(b'{"error"'):
                status = int(json.loads(body).get("status", 500))
                rt.metrics.rejected.labels(str(status)).inc()
            else:
                arm = "canary" if b'"arm":"canary"' in body else "champion"
                rt.metrics.latency.labels(req.model, arm).observe(time.perf_counter() - started)
        else:
            rt.metrics.rejected.labels(str(status)).inc()
        headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _docs(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass ``/docs.json`` through with ``/predict`` rewritten and the ``/v2`` routes added."""

        async def finish(start: Message, body: bytes) -> None:
            if start.get("status") == 200:
                body = json.dumps(self._one_object_contract(json.loads(body))).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, _buffered(send, finish))

    def _one_object_contract(self, doc: dict[str, Any]) -> dict[str, Any]:
        operation = doc.get("paths", {}).get(self.path, {}).get("post")
        if operation is None:
            return doc
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        oip_paths, oip_schemas = oip_schema.openapi("ErrorBody")
        doc["paths"].update(oip_paths)
        schemas.update(oip_schemas)
        ref = "#/components/schemas/{model}"
        schemas.setdefault("PredictRequest", PredictRequest.model_json_schema(ref_template=ref))
        schemas["PredictResponse"] = PredictResponse.model_json_schema(ref_template=ref)
        schemas["ErrorBody"] = _ERROR_SCHEMA
        operation["requestBody"] = {"required": True, "content": _json_of("PredictRequest")}
        operation["responses"] = {
            "200": {"description": "The prediction", "content": _json_of("PredictResponse")},
            **{
                code: {"description": text, "content": _json_of("ErrorBody")}
                for code, text in _ERRORS.items()
            },
        }
        return doc

    async def _reply(self, send: Send, rt: Any, body: dict[str, Any]) -> None:
        status = body["status"]
        if rt is not None:
            rt.metrics.rejected.labels(str(status)).inc()
        await send_json(send, status, body)


def _json_of(schema: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}


def _buffered(send: Send, finish: Callable[[Message, bytes], Awaitable[None]]) -> Send:
    """An ASGI ``send`` that holds the response back and hands (start, whole body) to ``finish``."""
    start: Message = {}
    chunks: list[bytes] = []

    async def capture(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            await finish(start, b"".join(chunks))

    return capture


__all__ = ["PredictGateway"]
