"""Load shedding for scoring requests: fast 503s, and a bounded number in flight per worker.

Two pieces, because refusing has to be cheap. Above saturation a refusal that
went through BentoML's middleware (metrics, a tracing span per request and per
send, the deadline) and mlpipe's (keys, intake) cost about half as much CPU as
a served request, so the refusals themselves took the CPU the admitted
requests needed and goodput collapsed (decision 009).

- :class:`FrontDoor` wraps the whole app, before anything else runs, and
  refuses a scoring request (``/predict``, ``/v2/models/…/infer``) while the
  worker is saturated. It holds no slot.
- :class:`ReadinessGate` sits just inside the auth layer and refuses a scoring
  request while the worker's models are still loading: after authentication,
  so a client without a key gets 401 whatever the worker's state, never a 503
  that tells it the server is starting (issue 29, item 10).
- :class:`OverloadGate` sits after the intake, so a client still sending its
  body holds nothing; it counts the requests in flight and refuses the few
  that pass the front door in the same instant as the last free slot is taken.

The front door and the gate decide on the worker's one
:class:`~mlpipe.serving.Admission`.

A refusal is 503 with a JSON body and ``Retry-After``. While the worker is
still loading (say it just restarted after a crash) it also says
``Connection: close``, so the client reconnects and may land on a worker that
is ready. An overloaded worker keeps the connection: a reconnect per refusal
cost both sides more CPU just when there was none to spare (above saturation
the accepted p99 was several times higher with it; decision 007).

Workers share one listening socket, and the one that wakes first accepts a
whole burst of new connections, so keep-alive clients can all end up on one
worker. Every ``reconnect_every``-th answer therefore says ``Connection:
close``: the client reconnects, and whichever worker is free to accept takes it
(decision 007).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlpipe.serving._admission import Admission
from mlpipe.serving._asgi import CONNECTION_CLOSE, ASGIApp, Message, Receive, Scope, Send
from mlpipe.serving._context import Route, context_of, route_of_path
from mlpipe.serving._error_bodies import HTTP_STATUS, NotReady, Overloaded, error_for
from mlpipe.serving._header_guard import Shed
from mlpipe.serving._refusal import count_refusal, refuse
from mlpipe.serving._runtime import RuntimeSlot

if TYPE_CHECKING:
    from mlpipe.serving._lane import PredictLane

_OVERLOADED = HTTP_STATUS[Overloaded]


class FrontDoor:
    """Refuse scoring requests at once while saturated; pass everything else."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        admission: Admission,
        retry_after_s: int = 1,
        runtime: RuntimeSlot | None = None,
        lane: PredictLane | None = None,
    ) -> None:
        self.app = app
        self.admission = admission
        self.runtime = runtime or RuntimeSlot()
        self.retry_after = (b"retry-after", str(retry_after_s).encode())
        self.lane = lane  # for the worker's protocol (decision 047)
        self._shed: tuple[str, Shed] | None = None  # the last shed answer, by its message

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if context_of(scope).route.scoring and (refusal := self.admission.refusal()):
            await refuse(self.runtime, send, error_for(refusal), [self.retry_after])
            return
        await self.app(scope, receive, send)

    def shed(self, path: str) -> Shed | None:
        """The answer :meth:`__call__` would give a scoring request on ``path`` right now,
        or None: for the worker's protocol, which answers it from the head
        (:class:`~mlpipe.serving._header_guard.HeadGuard`); counted as a refusal."""
        if not route_of_path(path).scoring or (refusal := self.admission.refusal()) is None:
            return None
        count_refusal(self.runtime, _OVERLOADED)
        message = str(refusal)
        if self._shed is None or self._shed[0] != message:  # the message changes with nothing
            body = json.dumps(error_for(refusal)).encode()
            headers = [(b"content-type", b"application/json"), self.retry_after]
            self._shed = (message, Shed(_OVERLOADED, headers, body))
        return self._shed[1]


class ReadinessGate:
    """Refuse scoring requests while this worker's models are loading; pass everything else."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        retry_after_s: int = 1,
        runtime: RuntimeSlot | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        self.retry_after = (b"retry-after", str(retry_after_s).encode())
        self.runtime = runtime or RuntimeSlot()
        self._ready = ready or self.runtime.ready

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if context_of(scope).route.scoring and not self._ready():
            body = error_for(NotReady("not ready: models still loading"))
            await refuse(self.runtime, send, body, [self.retry_after, CONNECTION_CLOSE])
            return
        await self.app(scope, receive, send)


class OverloadGate:
    """Count ``/predict`` requests in flight; 503 + ``Retry-After`` beyond the admission's bound."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        admission: Admission,
        retry_after_s: int = 1,
        reconnect_every: int = 0,
        runtime: RuntimeSlot | None = None,
    ) -> None:
        self.app = app
        self.runtime = runtime or RuntimeSlot()
        self.admission = admission
        self.retry_after = (b"retry-after", str(retry_after_s).encode())
        self.reconnect_every = reconnect_every
        self._admitted = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if context_of(scope).route is not Route.PREDICT:
            await self.app(scope, receive, send)
            return
        admission = self.admission
        if refusal := admission.refusal():
            await refuse(self.runtime, send, error_for(refusal), [self.retry_after])
            return
        self._admitted += 1
        if self.reconnect_every and self._admitted % self.reconnect_every == 0:
            send = _closing(send)
        admission.hold()
        try:
            await self.app(scope, receive, send)
        finally:
            admission.release()


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` added to the response head."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), CONNECTION_CLOSE]}
        await send(message)

    return closing


__all__ = ["FrontDoor", "OverloadGate", "ReadinessGate"]
