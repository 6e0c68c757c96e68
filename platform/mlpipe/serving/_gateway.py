"""The gateway: pure-ASGI middleware that answers ``POST /predict`` through BentoML's batcher.

``/predict`` takes one object and returns one object; BentoML's adaptive batcher
merges them into the batches the pipeline scores. This layer, per request and
before the request joins a batch:

- refuses malformed JSON (400); the body's size was checked by the intake (413),
  which sits above this layer in the stack (:mod:`mlpipe.serving._stack`);
- validates it (pydantic; 422 naming the field), refuses a control character
  in its ``request_id`` or entity strings (400: the log and the warehouse keep
  them), checks the model is served here (404), that the inputs it needs are
  there and that each join key fits its entity's Feast type (422: a key the
  store cannot read, such as ``2**63`` for an INT64 entity, would otherwise
  fail the read and count against the feature-store breaker of every tenant);
- sets ``request_id`` (if absent), ``received_ns`` (when the intake saw the
  request arrive, else now), ``tenant`` and ``pin``;
- awaits its answer from ``batch`` (in the service: BentoML's batcher for the
  ``predict`` API, called directly, not through BentoML's HTTP route, which
  parsed, validated and serialized every request a second time: half the
  server's CPU a request; decision 018) and gives an error item its own status.

Every error body is ``{"error": ..., "status": ..., "field": ...}``; a refusal
is an error whose class gives the status in
:data:`~mlpipe.serving._error_bodies.HTTP_STATUS`, the one table of them. A
rejected request never reaches the pipeline, so it leaves no log row. These
checks are :func:`parse_request` and :func:`admit`, which the Open Inference
Protocol layer applies to every row of an infer request.

BentoML's OpenAPI document (``/docs.json``) describes the batch API it serves,
a list of requests; the gateway rewrites the ``/predict`` operation in it to the
one-object contract clients actually use, and adds the Open Inference Protocol
routes (:func:`~mlpipe.serving._oip_schema.openapi`), which BentoML never sees, so
clients and fuzzers generated from the document send what the service accepts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
from pydantic import ValidationError

from mlpipe.errors import MlpipeError
from mlpipe.serving import _oip_schema
from mlpipe.serving._asgi import (
    ASGIApp,
    ClientDisconnected,
    Message,
    Receive,
    Scope,
    Send,
    read_body,
    response_head,
)
from mlpipe.serving._context import RequestContext, Route, context_of
from mlpipe.serving._error_bodies import (
    HTTP_STATUS,
    InvalidRequest,
    MalformedRequest,
    Overloaded,
    error_body,
    error_for,
    status_of,
)
from mlpipe.serving._ids import invisible_character_problem, new_request_id
from mlpipe.serving._item import Scored
from mlpipe.serving._refusal import refuse
from mlpipe.serving._runtime import RuntimeSlot
from mlpipe.serving._schema import (
    PredictRequest,
    PredictResponse,
    control_character_problem,
    describe_validation_error,
)

logger = logging.getLogger("mlpipe.serving.gateway")
_PREDICT = "/predict"
_ENCODE = msgspec.json.encode
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


_OVERLOADED = HTTP_STATUS[Overloaded]  # BentoML's batcher refuses with its own 503

# Answers requests as part of batches, each in its place: BentoML's adaptive batcher in
# the service. A /predict is handed over alone, the rows of a /v2 infer request together.
Batch = Callable[[Sequence[PredictRequest]], Awaitable[list[Scored]]]


def batch_refusal(exc: Exception, what: str) -> dict[str, Any]:
    """The error body for a batcher call that raised: the batcher's own refusal (503,
    overloaded: it would miss ``serving.max_latency_ms``), or a failed batch (500;
    ``what`` and the traceback go to the server log)."""
    status = status_of(exc)
    if status == _OVERLOADED:
        return error_body(str(exc), status)
    if status >= 500:
        logger.exception(what)
    return error_body("the batch failed; see the server log", status)


def parse_request(data: bytes | dict[str, Any]) -> PredictRequest:
    """A ``/predict`` body (JSON bytes, or the dict of one) as a request.

    Raises :class:`MalformedRequest` for malformed JSON (400), :class:`InvalidRequest`
    naming the field for a body that breaks the contract (422).
    """
    try:
        if isinstance(data, dict):
            return PredictRequest.model_validate(data)
        return PredictRequest.model_validate_json(data)
    except ValidationError as exc:
        field, message = describe_validation_error(exc)
        if exc.errors()[0]["type"] == "json_invalid":
            raise MalformedRequest(f"malformed JSON: {message}") from exc
        raise InvalidRequest(message, field) from exc


def admit(runtime: RuntimeSlot, req: PredictRequest, ctx: RequestContext) -> PredictRequest:
    """``req`` ready for a batch: the gateway's checks, in one place.

    Raises an :class:`~mlpipe.errors.MlpipeError` whose class is the answer
    (:data:`~mlpipe.serving._error_bodies.HTTP_STATUS`): a control character
    in a string the log keeps is 400, a zero-width or bidirectional formatting
    one in an id or entity value 422; not ready is 503; a model not served
    here is 404; a missing input or a join key outside its entity's type is
    422 naming the field. The admitted request gets its ``request_id`` (if
    absent), ``received_ns`` (when the intake saw it, else now), ``tenant``
    and ``pin`` (from the request's context, ``ctx``).
    """
    problem = control_character_problem(req)
    if problem is not None:
        raise MalformedRequest(problem[1], problem[0])
    problem = invisible_character_problem(req)
    if problem is not None:
        raise InvalidRequest(problem[1], problem[0])
    runtime.ready_runtime().pipeline.check(req)
    return req.model_copy(
        update={
            "request_id": req.request_id or new_request_id(),
            "received_ns": ctx.received_ns or time.time_ns(),
            "tenant": ctx.caller.tenant,
            "pin": ctx.caller.pin,
        }
    )


class PredictGateway:
    """Wraps the BentoML app; only ``POST /predict`` is answered here, through ``batch``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        runtime: RuntimeSlot,
        batch: Batch,
        response_headers: Callable[[], list[tuple[bytes, bytes]]] | None = None,
    ) -> None:
        self.app = app
        self.runtime = runtime
        self.batch = batch
        self.response_headers = response_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = context_of(scope)
        if ctx.route is Route.DOCS and scope["method"] == "GET":
            await self._docs(scope, receive, send)
            return
        if ctx.route is not Route.PREDICT or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            body = await read_body(scope, receive)  # the intake held it to max_body_bytes
        except ClientDisconnected:
            return  # nobody to answer
        try:
            req = admit(self.runtime, parse_request(body), ctx)
        except MlpipeError as exc:
            await refuse(self.runtime, send, error_for(exc))
            return
        await self._answer(send, req, started)

    async def _answer(self, send: Send, req: PredictRequest, started: float) -> None:
        """Hand ``req`` to the batcher and answer with its result, or its error's status."""
        try:
            (result,) = await self.batch([req])
        except Exception as exc:  # the batcher's refusal (503) or a failed batch (500)
            body = batch_refusal(exc, f"batch with request {req.request_id} failed")
            await refuse(self.runtime, send, {**body, "request_id": req.request_id})
            return
        assert isinstance(result, dict), "a request of its own is answered by its batch"
        if "error" in result:
            await refuse(self.runtime, send, result)
            return
        rt = self.runtime.runtime
        assert rt is not None  # admitted: the slot holds a ready runtime
        rt.metrics.request_latency(req.model, result["arm"]).observe(time.perf_counter() - started)
        data = _ENCODE(result)
        headers = response_head(b"application/json", data)
        if self.response_headers is not None:
            headers += self.response_headers()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

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
        operation = doc.get("paths", {}).get(_PREDICT, {}).get("post")
        if operation is None:
            return doc
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        oip_paths, oip_schemas = _oip_schema.openapi("ErrorBody")
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


__all__ = ["PredictGateway", "admit", "parse_request"]
