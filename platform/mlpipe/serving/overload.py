"""Admission control for ``/predict``: a bounded number in flight per worker, fast 503 beyond.

A request that would only wait (the worker already holds ``max_inflight``
requests, or its models are still loading) is answered at once with 503, a
JSON body and ``Retry-After``, rather than joining an unbounded queue. While
the worker is still loading (say it just restarted after a crash) the 503 also
says ``Connection: close``, so the client reconnects and may land on a worker
that is ready. An overloaded worker keeps the connection: a reconnect per
refusal cost both sides more CPU just when there was none to spare (above
saturation, accepted p99 ~0.9 s with it, ~0.15 s without; bench/README.md).

Workers share one listening socket, and the one that wakes first accepts a
whole burst of new connections, so keep-alive clients can all end up on one
worker. Every ``reconnect_every``-th answer therefore says ``Connection:
close``: the client reconnects, and whichever worker is free to accept takes
it. ``/readyz`` reports not ready while the worker is saturated
(:func:`saturated`).
"""

from __future__ import annotations

from collections.abc import Callable

from mlpipe.serving import runtime as _runtime
from mlpipe.serving.asgi import ASGIApp, Message, Receive, Scope, Send, send_json

_state = {"inflight": 0, "limit": 0}


def saturated() -> bool:
    """True while this worker holds as many ``/predict`` requests as it admits."""
    return _state["limit"] > 0 and _state["inflight"] >= _state["limit"]


class OverloadGate:
    """503 + ``Retry-After`` when not ready or over ``max_inflight``; otherwise pass through."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_inflight: int,
        retry_after_s: int = 1,
        reconnect_every: int = 0,
        path: str = "/predict",
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        self.max_inflight = max_inflight
        self.retry_after = str(retry_after_s).encode()
        self.reconnect_every = reconnect_every
        self.path = path
        self._ready = ready or _runtime_ready
        self._admitted = 0
        _state["limit"] = max_inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        if not self._ready():
            await self._refuse(send, "not ready: models still loading", close=True)
            return
        if _state["inflight"] >= self.max_inflight:
            await self._refuse(send, f"overloaded: {self.max_inflight} requests in flight")
            return
        self._admitted += 1
        if self.reconnect_every and self._admitted % self.reconnect_every == 0:
            send = _closing(send)
        _state["inflight"] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            _state["inflight"] -= 1

    async def _refuse(self, send: Send, message: str, *, close: bool = False) -> None:
        rt = _runtime.current()
        if rt is not None:
            rt.metrics.rejected.labels("503").inc()
        headers = [(b"retry-after", self.retry_after), *([_CLOSE] if close else [])]
        await send_json(send, 503, {"error": message, "status": 503}, headers)


_CLOSE = (b"connection", b"close")


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` added to the response head."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await send(message)

    return closing


def _runtime_ready() -> bool:
    rt = _runtime.current()
    return rt is not None and rt.ready


__all__ = ["OverloadGate", "saturated"]
