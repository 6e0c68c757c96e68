"""Admission control for ``/predict``: a bounded number in flight per worker, fast 503 beyond.

A request that would only wait (the worker already holds ``max_inflight``
requests, or its models are still loading) is answered at once with 503, a
JSON body and ``Retry-After``, rather than joining an unbounded queue. The
503 also says ``Connection: close``: a client on a keep-alive connection to a
worker that is still loading (say one just restarted after a crash)
reconnects, and may land on a worker that is ready. ``/readyz`` reports not
ready while the worker is saturated (:func:`saturated`).
"""

from __future__ import annotations

from collections.abc import Callable

from mlpipe.serving import runtime as _runtime
from mlpipe.serving.asgi import ASGIApp, Receive, Scope, Send, send_json

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
        path: str = "/predict",
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        self.max_inflight = max_inflight
        self.retry_after = str(retry_after_s).encode()
        self.path = path
        self._ready = ready or _runtime_ready
        _state["limit"] = max_inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        if not self._ready():
            await self._refuse(send, "not ready: models still loading")
            return
        if _state["inflight"] >= self.max_inflight:
            await self._refuse(send, f"overloaded: {self.max_inflight} requests in flight")
            return
        _state["inflight"] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            _state["inflight"] -= 1

    async def _refuse(self, send: Send, message: str) -> None:
        rt = _runtime.current()
        if rt is not None:
            rt.metrics.rejected.labels("503").inc()
        headers = [(b"retry-after", self.retry_after), (b"connection", b"close")]
        await send_json(send, 503, {"error": message, "status": 503}, headers)


def _runtime_ready() -> bool:
    rt = _runtime.current()
    return rt is not None and rt.ready


__all__ = ["OverloadGate", "saturated"]
