"""Request intake: the first look at a request body, before any layer parses it.

Pure-ASGI middleware, just inside the auth layer and outside everything that
reads a body (the Open Inference Protocol layer, the gateway, BentoML). For
every HTTP request that carries a body (``POST``, ``PUT``, ``PATCH``, or any
request with a ``Content-Length`` or ``Transfer-Encoding``), on every path:

- a ``Content-Type`` that is not JSON gets 415 (with ``Connection: close``,
  as every refusal here: the body is left unread). Absent, ``application/json``
  and ``application/*+json`` (parameters allowed) pass; so does
  ``application/octet-stream`` on a ``/v2`` path with
  ``Inference-Header-Content-Length`` (Triton's binary tensor extension, which
  :mod:`mlpipe.serving._oip` decodes as raw numbers). This is what keeps
  BentoML's ``application/vnd.bentoml+pickle`` decoding (meant for its
  service-to-service calls) out of reach of any request, whatever BentoML's
  own checks cover;
- a body declared or delivered over ``max_body_bytes`` gets 413. This is the
  one place the size limit is enforced: the layers below read what it hands
  them without a limit of their own;
- a body not fully delivered within ``timeout_s`` of the request's arrival
  (``serving.request_timeout_s``) gets 408 with ``Connection: close``, so a
  slow client cannot hold a connection and a request past the request timeout.

It stamps the arrival time (the request context's ``received_ns``) before
anything else, so the 504 deadline and the logged latency count from it.
The whole body is then handed down in one message, so no layer below waits on
the client again. Refusals are ``{"error": ..., "status": ...}``; a refused
request reaches nothing below, so it leaves no prediction-log row.
"""

from __future__ import annotations

import time

from mlpipe.serving._asgi import (
    CONNECTION_CLOSE,
    ASGIApp,
    ClientDisconnected,
    Message,
    Receive,
    Scope,
    Send,
    read_body,
)
from mlpipe.serving._context import context_of
from mlpipe.serving._error_bodies import (
    BodyTooLarge,
    BodyTooSlow,
    UnsupportedMediaType,
    error_for,
)
from mlpipe.serving._refusal import refuse
from mlpipe.serving._runtime import RuntimeSlot
from mlpipe.serving._timeouts import Timeouts

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_BINARY_TENSORS = "application/octet-stream"
_JSON_ONLY = [b"application/json"]  # the usual request's Content-Type lines


class RequestIntake:
    """415 for a body that is not JSON, 413 over the size limit, 408 for a body too slow."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        timeout_s: float,
        runtime: RuntimeSlot | None = None,
    ) -> None:
        self.app = app
        self.runtime = runtime or RuntimeSlot()  # where its refusals are counted
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self._timeouts = Timeouts(timeout_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The request's clock starts here, before its body: the 504 deadline counts from it.
        context_of(scope).received_ns = time.time_ns()
        headers = dict(reversed(scope["headers"]))  # the first of each wins, as in Starlette
        if not _carries_body(scope["method"], headers):
            await self.app(scope, receive, send)
            return
        # Every Content-Type line is checked: a JSON one first cannot smuggle a second.
        types = [v for k, v in scope["headers"] if k == b"content-type"] or [b""]
        problem = None
        if types != _JSON_ONLY:  # the usual request: one Content-Type, plain JSON
            problem = next(
                (p for t in types if (p := _content_type_problem(scope["path"], t, headers))), None
            )
        if problem is not None:
            await refuse(
                self.runtime, send, error_for(UnsupportedMediaType(problem)), [CONNECTION_CLOSE]
            )
            return
        try:
            async with self._timeouts():
                body = await read_body(scope, receive, self.max_body_bytes)
        except ClientDisconnected:
            return  # nobody to answer, and nothing below should act on half a body
        except TimeoutError:
            message = f"request body not received within {self.timeout_s:g} s"
            await refuse(self.runtime, send, error_for(BodyTooSlow(message)), [CONNECTION_CLOSE])
            return
        if body is None:
            message = f"body over {self.max_body_bytes} bytes"
            await refuse(self.runtime, send, error_for(BodyTooLarge(message)), [CONNECTION_CLOSE])
            return
        await self.app(scope, _replay(body, receive), send)


def _carries_body(method: str, headers: dict[bytes, bytes]) -> bool:
    if method in _BODY_METHODS or b"transfer-encoding" in headers:
        return True
    return headers.get(b"content-length", b"0").strip() not in (b"", b"0")


def _content_type_problem(path: str, value: bytes, headers: dict[bytes, bytes]) -> str | None:
    """Why a body with this ``Content-Type`` is refused, or None when it is JSON (or absent)."""
    media = value.decode("latin-1").split(";", 1)[0].strip().lower()
    if media in ("", "application/json"):
        return None
    if media.startswith("application/") and media.endswith("+json"):
        return None
    if (
        media == _BINARY_TENSORS
        and (path == "/v2" or path.startswith("/v2/"))
        and b"inference-header-content-length" in headers
    ):
        return None
    return f"unsupported content type {media!r}: send the body as application/json"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the read body once, then the client's own messages."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()  # http.disconnect, when the client goes
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


__all__ = ["RequestIntake"]
