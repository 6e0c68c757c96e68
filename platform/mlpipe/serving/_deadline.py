"""The server's last-resort deadline: 504 when a request outlives ``traffic.timeout``.

BentoML's own ``TimeoutMiddleware`` (bentoml 1.4) does the same job, but it
starts one task per request and schedules a timer with ``loop.call_later`` that
it never cancels. A timer keeps its callback's future and a copy of the
request's context (OpenTelemetry span included) alive for the whole timeout
(``request_timeout_s`` + 5 s), so at ~2,000 requests/s a worker carried
~0.5 M such objects into the oldest GC generation, and each full collection
scanned them: stalls of 200-700 ms that grew with the run and set the p99
(decision 006). :class:`Deadline` keeps BentoML's contract
(a 504 JSON answer if no response has started in time; none once it has) with
an ``asyncio.Timeout`` that ends with the request, all of them timed by one timer
(:class:`~mlpipe.serving._timeouts.Timeouts`, decision 042).
:class:`~mlpipe.serving._bentoml_private.ScoringAppFactory` puts it in BentoML's place.
"""

from __future__ import annotations

from mlpipe.serving._asgi import ASGIApp, Message, Receive, Scope, Send, send_json
from mlpipe.serving._error_bodies import TimedOut, error_for
from mlpipe.serving._timeouts import Timeouts


class Deadline:
    """504 if ``app`` has not started its response within ``timeout`` seconds."""

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout
        self._timeouts = Timeouts(timeout)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        watched = self._timeouts()
        deadline = watched.timeout

        async def send_started(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self._timeouts.disarm(deadline)  # an answer has begun: let it finish
            await send(message)

        try:
            async with watched:
                await self.app(scope, receive, send_started)
        except TimeoutError:
            if started or not deadline.expired():  # the app's own TimeoutError
                raise
            error = f"Not able to process the request in {self.timeout:g} seconds"
            body = error_for(TimedOut(error))
            await send_json(send, body["status"], body)


__all__ = ["Deadline"]
