"""The Open Inference Protocol (KServe/Triton "v2" REST) in front of ``/predict``.

Pure-ASGI middleware, placed inside the auth layer and the intake (which has
checked the body's type and size) and outside the overload gate and
:class:`~mlpipe.serving.PredictGateway`. It answers:

- ``GET /v2``, ``GET /v2/health/live``, ``GET /v2/health/ready``;
- ``GET /v2/models/{name}`` (and ``.../ready``): the model's inputs and outputs;
- ``POST /v2/models/{name}/infer``: each row of the request's tensors becomes
  one ``/predict`` request, checked as the gateway checks one
  (:func:`~mlpipe.serving._gateway.admit`: 400, 404, 422 for the first row at
  fault); the tenant is charged a token per row (the auth layer took one on
  arrival; 429 with ``Retry-After`` when the rest are not there); then the
  rows are scored in BentoML's batches, and answered and logged together:
  every row is, or none is (decisions 024, 040). The answers are put back
  together as the output tensors of the deployed version's task
  (binary ``score`` FP64 and ``label`` INT64; multiclass ``probabilities``
  FP64 ``[N, K]`` and ``label``; regression ``prediction`` FP64; see
  :mod:`mlpipe.serving._oip_codec`) and, when asked, ``version``, ``arm`` and
  ``request_id`` (BYTES).

An infer request is one request to admission: the front door refuses it
(503) while the worker is saturated, as it refuses ``/predict``, and holds no
in-flight slot. Its rows are checked ``CHUNK_ROWS`` at a time, the worker free
between, then handed to BentoML's batcher, each a job of its own as a
``/predict`` is, a batch's worth at a time (:class:`~mlpipe.serving.Batcher`), so
they share batches with other requests and others get in between; each comes
back scored, and the pipeline answers and logs them together
(:meth:`~mlpipe.serving.ScoringPipeline.finish_together`; decision 040).
Its rows used to go down the stack one ``/predict`` each, each taking a slot:
a request of more rows than ``reliability.max_inflight`` was always refused,
after the rows that got a slot had been scored and logged.

Inputs are named after the model's request-time features (one column each,
shape ``[N]`` or ``[N, 1]``) and its entity join keys (INT64 or BYTES); one
``[N, F]`` tensor named ``features`` holds every feature in the order
``GET /v2/models/{name}`` lists them. Tensor data comes as JSON or in Triton's
binary tensor extension (``Inference-Header-Content-Length``); outputs are
binary when the request asks (``binary_data_output``, or ``binary_data`` on a
requested output), as ``tritonclient`` does by default; the tensors are read
and written in :mod:`mlpipe.serving._oip_codec`.

The deployment picks the version, as for ``/predict``: a versioned infer path
is refused (400). Errors are ``{"error": ..., "status": ...}`` with the status
``/predict`` would have given. The request and response messages are pydantic
models in :mod:`mlpipe.serving._oip_schema`: an infer request is validated
against its ``InferenceRequest`` (400 naming the field), and its ``openapi``
describes every route from the same models for ``/docs.json``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from mlpipe.errors import MlpipeError, NotFound
from mlpipe.security import retry_after
from mlpipe.serving._asgi import (
    ASGIApp,
    ClientDisconnected,
    Receive,
    Scope,
    Send,
    read_body,
    send_json,
)
from mlpipe.serving._context import Caller, Route, context_of
from mlpipe.serving._error_bodies import (
    HTTP_STATUS,
    ModelUnavailable,
    NoSuchEndpoint,
    NotReady,
    RateLimited,
    error_for,
)
from mlpipe.serving._gateway import Batch, admit, batch_refusal, parse_request
from mlpipe.serving._item import Together
from mlpipe.serving._oip_codec import (
    ProtocolError,
    check_shared,
    decode_request,
    encode_response,
    header_length,
    model_metadata,
    outputs_of,
    request_rows,
    requested_outputs,
    task_of,
)
from mlpipe.serving._oip_schema import PREFIX
from mlpipe.serving._refusal import refuse
from mlpipe.serving._runtime import RuntimeSlot, ServingRuntime

logger = logging.getLogger("mlpipe.serving.oip")

# Rows checked at a time, the event loop free between: a 1,024-row request held the
# worker's loop, and every other tenant's requests, for as long as it took (issue 29,
# item 8). They are scored in BentoML's batches, beside other requests.
CHUNK_ROWS = 64


class InferenceProtocol:
    """Wraps the app below the auth layer; only paths under ``/v2`` are touched."""

    def __init__(
        self, app: ASGIApp, *, runtime: RuntimeSlot, batch: Batch, max_rows: int = 1024
    ) -> None:
        self.app = app
        self.runtime = runtime
        self.batch = batch
        self.max_rows = max_rows

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = context_of(scope).route
        if route is not Route.INFER and route is not Route.PROTOCOL:
            await self.app(scope, receive, send)
            return
        try:
            await self._route(scope, receive, send)
        except ClientDisconnected:
            return  # nobody to answer
        except MlpipeError as exc:  # this layer's own refusals carry no field, and are not counted
            await send_json(send, *_plain(error_for(exc)))

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts = [p for p in scope["path"][len(PREFIX) :].split("/") if p]
        method = scope["method"]
        if method == "GET" and parts == []:
            await send_json(send, 200, _server_metadata())
        elif method == "GET" and parts == ["health", "live"]:
            await send_json(send, 200, {"live": True})
        elif method == "GET" and parts == ["health", "ready"]:
            await _health_ready(send, self.runtime.runtime)
        elif len(parts) >= 2 and parts[0] == "models":
            await self._model_route(scope, receive, send, parts[1], parts[2:])
        else:
            raise NoSuchEndpoint(f"no such endpoint: {method} {scope['path']}")

    async def _model_route(
        self, scope: Scope, receive: Receive, send: Send, name: str, rest: list[str]
    ) -> None:
        method = scope["method"]
        if len(rest) >= 2 and rest[0] == "versions":
            if rest[2:] == ["infer"]:
                raise ProtocolError(
                    "mlpipe routes versions by deployment (champion/canary); "
                    f"POST {PREFIX}/models/{name}/infer instead"
                )
            rest = rest[2:]
        served = _served(self.runtime, name)
        if method == "GET" and rest == []:
            await send_json(send, 200, model_metadata(served))
        elif method == "GET" and rest == ["ready"]:
            await send_json(send, 200, {"name": name, "ready": True})
        elif method == "POST" and rest == ["infer"]:
            await self._infer(scope, receive, send, served)
        else:
            raise NoSuchEndpoint(f"no such endpoint: {method} {scope['path']}")

    # -- infer --

    async def _infer(self, scope: Scope, receive: Receive, send: Send, served: Any) -> None:
        """Score the request's rows in the batcher's batches, then answer and log them as
        one: all answered, or none (and none logged)."""
        started = time.perf_counter()
        body = await read_body(scope, receive)  # the intake held it to max_body_bytes
        header_len = header_length(_header(scope, b"inference-header-content-length"))
        request = decode_request(body, header_len)
        rows = request_rows(served, request, self.max_rows)
        outputs = outputs_of(task_of(served))
        # refuse outputs unknown, or not shared by the versions that answer, before scoring
        check_shared(served, requested_outputs(request, outputs))
        ctx = context_of(scope)
        try:
            rt = self.runtime.ready_runtime()
            # the generation loaded now scores every row (a reload replaces it whole)
            together = Together(rt.pipeline.loader.models)
            requests = []
            for i, row in enumerate(rows):
                if i % CHUNK_ROWS == 0:  # decoding the tensors was the first piece
                    await asyncio.sleep(0)
                requests.append(admit(self.runtime, parse_request(row), ctx).joining(together))
        except MlpipeError as exc:
            await refuse(self.runtime, send, error_for(exc))
            return
        over_limit = _charge_rows(ctx.caller, len(requests))
        if over_limit is not None:
            await refuse(self.runtime, send, *over_limit)
            return
        try:
            answers = await rt.pipeline.finish_together(await self.batch(requests))
        except Exception as exc:  # the batcher's refusal (503) or a failed batch (500)
            what = f"infer request of {len(requests)} rows for {served.name} failed"
            await refuse(self.runtime, send, batch_refusal(exc, what))
            return
        failed = next((a for a in answers if "error" in a), None)
        if failed is not None:
            await refuse(self.runtime, send, {k: v for k, v in failed.items() if k != "request_id"})
            return
        elapsed = time.perf_counter() - started
        for answer in answers:
            rt.metrics.request_latency(served.name, answer["arm"]).observe(elapsed)
        await asyncio.sleep(0)  # observing and encoding 1,024 answers take a few ms each
        await _reply(send, 200, *encode_response(served.name, request, answers, outputs))


def _charge_rows(
    caller: Caller, rows: int
) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]] | None:
    """Take a token per row beyond the one the request paid on arrival; the 429 if short.

    Without this one token bought up to ``max_rows`` predictions. A request of
    more rows than the tenant's bucket holds can never pass: its 429 says so
    and has no ``Retry-After``.
    """
    charge = caller.charge
    if charge is None or rows <= 1:
        return None  # no tenant (auth off), or the arrival token covered it
    wait = charge(rows, paid=1)
    if wait <= 0:
        return None
    tenant = caller.tenant
    if math.isinf(wait):
        message = (
            f"rate limit of tenant {tenant!r}: {rows} rows cost {rows} tokens, more than "
            "its burst holds; send fewer rows per request"
        )
        return error_for(RateLimited(message)), []
    seconds = retry_after(wait)
    message = (
        f"rate limit of tenant {tenant!r} exceeded: {rows} rows cost {rows} tokens; "
        f"retry after {seconds}s"
    )
    return error_for(RateLimited(message)), [(b"retry-after", str(seconds).encode())]


async def _health_ready(send: Send, rt: ServingRuntime | None) -> None:
    """Server readiness, as ``/readyz`` decides it (less saturation: an OIP client's probe)."""
    problem = "models still loading" if rt is None else rt.readiness_problem()
    if problem is None:
        await send_json(send, 200, {"ready": True})
    else:
        status = HTTP_STATUS[NotReady]
        await send_json(send, status, {"ready": False, "error": f"not ready: {problem}"})


def _served(runtime: RuntimeSlot, name: str) -> Any:
    rt = runtime.ready_runtime()
    served = rt.loader.models.get(name)
    if served is None:
        failure = rt.loader.failures.get(name)
        if failure is not None:
            raise ModelUnavailable(failure.message(name))
        known = ", ".join(sorted(rt.loader.models)) or "none"
        raise NotFound(f"model {name!r} is not deployed here (serving: {known})")
    return served


def _plain(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, body) of this layer's own refusal: the body without a ``field``."""
    return body["status"], {"error": body["error"], "status": body["status"]}


def _server_metadata() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("mlpipe")
    except PackageNotFoundError:
        ours = "dev"
    return {"name": "mlpipe", "version": ours, "extensions": ["binary_tensor_data"]}


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope["headers"]:
        if k == name:
            value: str = v.decode("latin-1")
            return value
    return None


async def _reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = ["InferenceProtocol"]
