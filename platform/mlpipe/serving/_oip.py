"""The Open Inference Protocol (KServe/Triton "v2" REST) in front of ``/predict``.

Pure-ASGI middleware, placed inside the auth layer and the intake (which has
checked the body's type and size) and outside the overload gate and
:class:`~mlpipe.serving.PredictGateway`. It answers:

- ``GET /v2``, ``GET /v2/health/live``, ``GET /v2/health/ready``;
- ``GET /v2/models/{name}`` (and ``.../ready``): the model's inputs and outputs;
- ``POST /v2/models/{name}/infer``: each row of the request's tensors becomes
  one ``/predict`` request sent down the same stack (overload gate, gateway
  validation, routing, features, batching, prediction log), and the answers
  are put back together as output tensors ``score`` (FP64), ``label``
  (INT64), ``version``, ``arm`` and ``request_id`` (BYTES).

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
import json
from typing import Any

from mlpipe.serving import _runtime
from mlpipe.serving._asgi import (
    ASGIApp,
    ClientDisconnected,
    Message,
    Receive,
    Scope,
    Send,
    read_body,
    send_json,
)
from mlpipe.serving._oip_codec import (
    ProtocolError,
    decode_request,
    encode_response,
    model_metadata,
    request_rows,
    requested_outputs,
)
from mlpipe.serving._oip_schema import PREFIX


class InferenceProtocol:
    """Wraps the app below the auth layer; only paths under ``/v2`` are touched."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_rows: int = 1024,
        predict_path: str = "/predict",
    ) -> None:
        self.app = app
        self.max_rows = max_rows
        self.predict_path = predict_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        try:
            await self._route(scope, receive, send)
        except ClientDisconnected:
            return  # nobody to answer
        except ProtocolError as exc:
            await send_json(send, exc.status, {"error": str(exc), "status": exc.status})

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts = [p for p in scope["path"][len(PREFIX) :].split("/") if p]
        method = scope["method"]
        rt = _runtime.current()
        ready = rt is not None and rt.ready
        if method == "GET" and parts == []:
            await send_json(send, 200, _server_metadata())
        elif method == "GET" and parts == ["health", "live"]:
            await send_json(send, 200, {"live": True})
        elif method == "GET" and parts == ["health", "ready"]:
            await send_json(send, 200 if ready else 503, {"ready": ready})
        elif len(parts) >= 2 and parts[0] == "models":
            await self._model_route(scope, receive, send, parts[1], parts[2:])
        else:
            raise ProtocolError(f"no such endpoint: {method} {scope['path']}", 404)

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
        served = _served(name)
        if method == "GET" and rest == []:
            await send_json(send, 200, model_metadata(served))
        elif method == "GET" and rest == ["ready"]:
            await send_json(send, 200, {"name": name, "ready": True})
        elif method == "POST" and rest == ["infer"]:
            await self._infer(scope, receive, send, served)
        else:
            raise ProtocolError(f"no such endpoint: {method} {scope['path']}", 404)

    # -- infer --

    async def _infer(self, scope: Scope, receive: Receive, send: Send, served: Any) -> None:
        body = await read_body(scope, receive)  # the intake held it to max_body_bytes
        header_len = _header(scope, b"inference-header-content-length")
        if header_len is not None and not header_len.isdigit():
            raise ProtocolError("Inference-Header-Content-Length: not a byte count")
        request = decode_request(body, int(header_len) if header_len else None)
        rows = request_rows(served, request, self.max_rows)
        requested_outputs(request)  # refuse unknown outputs before anything is scored
        answers = await asyncio.gather(*(self._predict(scope, row) for row in rows))
        for status, answer in answers:
            if status != 200:
                error = {"error": answer.get("error", str(answer)), "status": status}
                await send_json(send, status, error)
                return
        response = encode_response(served.name, request, [a for _, a in answers])
        await _reply(send, 200, *response)

    async def _predict(self, scope: Scope, row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One ``/predict`` down the stack below: (status, decoded JSON body)."""
        payload = json.dumps(row).encode()
        headers = [
            (k, v) for k, v in scope["headers"] if k not in (b"content-length", b"content-type")
        ]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        inner = {
            **scope,
            "method": "POST",
            "path": self.predict_path,
            "raw_path": self.predict_path.encode(),
            "query_string": b"",
            "headers": headers,
        }
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}

        status = 500
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(inner, receive, capture)
        raw = b"".join(chunks)
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"error": raw.decode(errors="replace")[:500]}
        if not isinstance(answer, dict):
            answer = {"error": str(answer)[:500]}
        return status, answer


def _served(name: str) -> Any:
    rt = _runtime.current()
    if rt is None or not rt.ready:
        raise ProtocolError("not ready: models still loading", 503)
    served = rt.loader.models.get(name)
    if served is None:
        known = ", ".join(sorted(rt.loader.models)) or "none"
        raise ProtocolError(f"model {name!r} is not deployed here (serving: {known})", 404)
    return served


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
            return v.decode("latin-1")
    return None


async def _reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = ["InferenceProtocol"]
