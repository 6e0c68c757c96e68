"""The predict lane: a ``POST /predict`` answered by the worker's HTTP protocol, not the ASGI app.

Through the app, each ``/predict`` costs an ASGI task, a scope and a pair of
``receive``/``send`` closures, a frame in each of nine middleware layers, and a
future and a wake-up in BentoML's batcher; the work they wrap (parse, admit,
score, log, encode) is a third of what a request costs the machine (decision
047). The lane does the same work without them:

- the protocol (:class:`~mlpipe.serving._header_guard.HeadGuard`) asks
  :meth:`PredictLane.take` once a ``POST``'s head is parsed. The lane takes a
  ``/predict`` that the layers above the gateway would pass untouched: the
  worker ready and not saturated, a JSON body (one ``Content-Type:
  application/json``) of a declared length up to ``serving.max_body_bytes``
  and 64 KiB (uvicorn stops reading past that until the app reads), no
  ``Expect``. Anything else goes through the app, which answers it as it
  always has; so does every request while ``serving.tracing`` is on (the
  lane makes no spans);
- keys and rate limits are judged by the same :class:`~mlpipe.serving._auth.Keys`
  the auth layer uses, once: a denial (401, 429) is answered from the head, as
  the layer answers it, with ``Connection: close``;
- the protocol gathers the body (408 and a close if it has not all come
  ``serving.request_timeout_s`` after the head, as the intake's) and hands the
  request over with :meth:`PredictLane.submit`. The requests handed over in one
  turn of the event loop are scored together, ``serving.max_batch_size`` at a
  time, by the same pipeline the batcher feeds: a batch is what came while the
  last one was scored, so it grows with the load and waits for nothing;
- the admission is held from the hand-over to the answer (503 if it filled
  meanwhile, as the overload gate's), every ``reliability.reconnect_every``-th
  answer closes its connection (decision 007), BentoML's traffic series and the
  gateway's latency histogram count each answer, refusals are counted by status,
  and a batch not scored within ``serving.request_timeout_s`` + 5 s is answered
  504 (the deadline layer's).

Bodies, statuses and headers are the app's, byte for byte (the ``Date`` aside);
the e2e tests check both paths against each other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT

from mlpipe.errors import MlpipeError
from mlpipe.serving._admission import Admission
from mlpipe.serving._asgi import CONNECTION_CLOSE, NO_CONTEXT, response_head
from mlpipe.serving._auth import Denied, Keys
from mlpipe.serving._context import ANONYMOUS, Caller, RequestContext, Route
from mlpipe.serving._error_bodies import BodyTooSlow, TimedOut, error_for
from mlpipe.serving._gateway import admit, batch_refusal, parse_request
from mlpipe.serving._header_guard import Shed
from mlpipe.serving._refusal import count_refusal
from mlpipe.serving._runtime import RuntimeSlot
from mlpipe.serving._timeouts import Timeouts

logger = logging.getLogger("mlpipe.serving.lane")

_PATH = "/predict"
_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"
_ENCODE = msgspec.json.encode


class Series(Protocol):
    """BentoML's traffic series of one route (``RouteMetrics``'s, decision 041)."""

    def began(self) -> None: ...
    def answered(self, status: int, seconds: float) -> None: ...
    def ended(self) -> None: ...


class Traffic(Protocol):
    """Where a route's series are found once the app has made them (``RouteTraffic``)."""

    def series(self, label: str) -> Series | None: ...


class Answering(Protocol):
    """What the lane needs of the connection it answers on (``HeadGuard``)."""

    def give(self, cycle: Any, answer: Shed, *, close: bool) -> None: ...


class Laned:
    """One request the lane took: who sent it, when, and where it is answered."""

    __slots__ = ("arrived_ns", "body", "caller", "cycle", "given", "protocol", "series", "started")

    def __init__(self, caller: Caller, series: Series) -> None:
        self.caller = caller
        self.series = series
        self.arrived_ns = time.time_ns()  # the 504 deadline and the logged latency count from it
        self.started = time.perf_counter()
        self.body = b""
        self.protocol: Answering | None = None  # set when handed over, with its cycle
        self.cycle: Any = None
        self.given = False


class PredictLane:
    """Takes ``/predict`` requests from the protocol and answers them in batches a loop turn."""

    def __init__(
        self,
        *,
        admission: Admission,
        runtime: RuntimeSlot,
        keys: Keys,
        traffic: Traffic,
        max_body_bytes: int,
        timeout_s: float,
        max_batch_size: int,
        retry_after_s: int = 1,
        reconnect_every: int = 0,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.admission = admission
        self.runtime = runtime
        self.keys = keys
        self.traffic = traffic
        # past uvicorn's high-water mark, reading waits for an app that reads
        self.max_body_bytes = min(max_body_bytes, HIGH_WATER_LIMIT)
        self.timeout_s = timeout_s
        self.window = max_batch_size
        self.retry_after = (b"retry-after", str(retry_after_s).encode())
        self.reconnect_every = reconnect_every
        self._ready = ready or runtime.ready
        self._deadline_s = timeout_s + 5
        self._deadline = Timeouts(self._deadline_s)
        self._handed: list[Laned] = []  # this loop turn's, not yet in a batch
        self._admitted = 0
        self._batches: set[asyncio.Task[None]] = set()

    def take(self, scope: Any) -> Laned | Shed | None:
        """For a ``POST``'s parsed head: the request taken (its body to come), a denial to
        answer now and close with, or None for the app to answer."""
        if scope["path"] != _PATH:
            return None
        length = _plain_length(scope["headers"])
        if length is None or length > self.max_body_bytes:
            return None
        series = self.traffic.series(_PATH)
        if series is None or not self._ready() or self.admission.refusal() is not None:
            return None
        caller = ANONYMOUS if self.keys.is_open(_PATH) else self.keys.judge(scope["headers"])
        series.began()
        if isinstance(caller, Denied):
            series.answered(caller.body["status"], 0.0)
            series.ended()
            return _answer(
                caller.body["status"], _JSON, json.dumps(caller.body).encode(), caller.headers
            )
        return Laned(caller, series)

    def too_slow(self, laned: Laned) -> Shed:
        """The 408 for a request whose body had not all come in time (the intake's)."""
        error = error_for(BodyTooSlow(f"request body not received within {self.timeout_s:g} s"))
        return self._refusal(laned, error, [CONNECTION_CLOSE])

    def abandon(self, laned: Laned) -> None:
        """The client left before its body had all come: nothing to answer."""
        laned.series.ended()

    def submit(self, protocol: Answering, cycle: Any, laned: Laned) -> None:
        """Hand over a request whose body has all come (``cycle.body``), to be answered on
        ``protocol`` in this loop turn's batch."""
        laned.protocol, laned.cycle, laned.body = protocol, cycle, cycle.body
        if (refusal := self.admission.refusal()) is not None:
            protocol.give(
                cycle, self._refusal(laned, error_for(refusal), [self.retry_after]), close=False
            )
            return
        self.admission.hold()
        self._handed.append(laned)
        if len(self._handed) == 1:
            asyncio.get_running_loop().call_soon(self._batch, context=NO_CONTEXT)

    def _batch(self) -> None:
        handed, self._handed = self._handed, []
        loop = asyncio.get_running_loop()
        for start in range(0, len(handed), self.window):
            task = loop.create_task(self._answer(handed[start : start + self.window]))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _answer(self, batch: list[Laned]) -> None:
        """Admit, score and answer ``batch``; what a fault left unanswered gets the 500 an
        app's unhandled error gets (``Internal Server Error``, and a close)."""
        try:
            await self._score(batch)
        except Exception:
            logger.exception("the predict lane failed on a batch of %d", len(batch))
            for laned in batch:
                if laned.protocol is not None and not laned.given:
                    answer = self._answered(laned, 500, _TEXT, b"Internal Server Error")
                    self._give(laned, answer, close=True)

    async def _score(self, batch: list[Laned]) -> None:
        """The gateway's checks, then the pipeline's batch, each answer as the gateway's."""
        admitted, requests = [], []
        for laned in batch:
            ctx = RequestContext(Route.PREDICT, laned.caller, laned.arrived_ns)
            try:
                requests.append(admit(self.runtime, parse_request(laned.body), ctx))
            except MlpipeError as exc:
                self._give(laned, self._refusal(laned, error_for(exc)))
                continue
            admitted.append(laned)
        if not requests:
            return
        try:
            async with self._deadline():
                results = await self.runtime.ready_runtime().pipeline.predict_batch_async(requests)
        except Exception as exc:  # the deadline, or a failed batch
            for laned, req in zip(admitted, requests, strict=True):
                self._give(laned, self._refusal(laned, self._failed(exc, req.request_id)))
            return
        metrics = self.runtime.ready_runtime().metrics
        for laned, req, result in zip(admitted, requests, results, strict=True):
            assert isinstance(result, dict), "a request of its own is answered by its batch"
            if "error" in result:
                self._give(laned, self._refusal(laned, result))
                continue
            seconds = time.perf_counter() - laned.started
            metrics.request_latency(req.model, result["arm"]).observe(seconds)
            self._give(laned, self._answered(laned, 200, _JSON, _ENCODE(result)))

    def _failed(self, exc: Exception, request_id: str | None) -> dict[str, Any]:
        """The deadline layer's 504, or the gateway's answer to a failed batch (500, logged)."""
        if isinstance(exc, TimeoutError):
            message = f"Not able to process the request in {self._deadline_s:g} seconds"
            return error_for(TimedOut(message))
        body = batch_refusal(exc, f"batch with request {request_id} failed")
        return {**body, "request_id": request_id}

    def _refusal(
        self, laned: Laned, body: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None
    ) -> Shed:
        """The error ``body`` as the app's ``refuse`` answers it, counted by its status."""
        count_refusal(self.runtime, body["status"])
        return self._answered(laned, body["status"], _JSON, json.dumps(body).encode(), extra)

    def _answered(
        self,
        laned: Laned,
        status: int,
        content_type: bytes,
        body: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> Shed:
        """The answer, counted in BentoML's traffic series as answered and ended."""
        laned.series.answered(status, max(time.perf_counter() - laned.started, 0.0))
        laned.series.ended()
        return _answer(status, content_type, body, extra)

    def _give(self, laned: Laned, answer: Shed, *, close: bool = False) -> None:
        """Answer an admitted request and let its slot go; every ``reconnect_every``-th
        closes its connection."""
        self.admission.release()
        laned.given = True
        self._admitted += 1
        close = close or (bool(self.reconnect_every) and self._admitted % self.reconnect_every == 0)
        assert laned.protocol is not None
        laned.protocol.give(laned.cycle, answer, close=close)


def _answer(
    status: int,
    content_type: bytes,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> Shed:
    """An answer with its headers as the app's (``response_head``); the protocol adds the
    date before them."""
    return Shed(status, response_head(content_type, body, extra or ()), body)


def _plain_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared length of a body with one ``Content-Type: application/json``, one
    ``Content-Length`` and no ``Transfer-Encoding`` or ``Expect``; None for any other."""
    json_types = 0
    length: int | None = None
    for name, value in headers:
        if name == b"content-type":
            if value != b"application/json":
                return None
            json_types += 1
        elif name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name in (b"transfer-encoding", b"expect"):
            return None
    return length if json_types == 1 else None


__all__ = ["Laned", "PredictLane"]
