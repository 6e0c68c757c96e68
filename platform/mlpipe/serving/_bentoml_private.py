"""Every use of BentoML's private API, in one file.

bentoml is pinned (1.4.x). What this module touches is not BentoML's public
API, so an upgrade may move or change it; ``tests/unit/serving/test_bentoml_private.py``
asserts that each name still exists with the signature used here, so an
upgrade fails there, loudly, rather than in a running server.

The scoring service is built through BentoML's own extension point,
``@bentoml.service(service_class=...)``: :func:`scoring_service_class` gives a
``bentoml.Service`` whose app comes from :class:`ScoringAppFactory` (BentoML's
factory, subclassed), so nothing of BentoML's is replaced for anyone else.

- :class:`ScoringAppFactory` builds the app with two of mlpipe's middleware in
  the places of BentoML's own: :class:`~mlpipe.serving.Deadline` for its
  ``TimeoutMiddleware``, which kept every request's context alive for the
  whole timeout (the GC stalls that made set the p99; decision 006), and
  :class:`RouteMetrics` for its traffic metrics, which labelled every series
  with the raw path, so any client could add series without bound (issue 23).
- :class:`Batcher`: the gateway hands a validated request to the ``predict``
  API's adaptive batcher (BentoML's ``CorkDispatcher`` with the API's limits and
  batch-size histogram, as its factory's ``batch_infer`` uses it, but wrapped
  around the API once, not for every request: decision 042) without BentoML's
  HTTP route, which serialized, parsed and validated every request again and
  serialized its answer: about half the server's CPU a request (decision 018).
  The service's app is built inside a layer of mlpipe's (the front door, decision 009).
- :func:`bind_once`: BentoML looks the API method up on the instance for every
  batch, and each lookup builds a new wrapper around ``inspect.signature``
  (decision 014).
- :func:`span_headers`: the ``X-BentoML-Request-ID`` header BentoML's route
  adds when tracing, from its trace context.
- :func:`configure_worker_logging`, :func:`enter_worker_context`,
  :func:`fresh_metrics_dir`: what BentoML's worker and arbiter do around a
  service, for mlpipe's own (:mod:`mlpipe.serving._worker`,
  :mod:`mlpipe.serving._arbiter`), which start uvicorn with the head guard as
  its protocol (decision 039).

This module imports bentoml (seconds); :mod:`mlpipe.serving` loads it only when
one of these names is first asked for, which only the service does.
"""

from __future__ import annotations

import asyncio
import logging.config
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import bentoml
from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.context import server_context, trace_context
from bentoml._internal.log import SERVER_LOGGING_CONFIG
from bentoml._internal.marshal.dispatcher import CorkDispatcher
from bentoml._internal.server.http.instruments import RunnerTrafficMetricsMiddleware
from bentoml._internal.server.http.traffic import TimeoutMiddleware
from bentoml._internal.utils.uri import join_paths
from bentoml.exceptions import ServiceUnavailable
from bentoml.serving import ensure_prometheus_dir
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.middleware import Middleware
from starlette.routing import compile_path

from mlpipe.serving._asgi import NO_CONTEXT, ASGIApp, Message, Receive, Scope, Send
from mlpipe.serving._deadline import Deadline
from mlpipe.serving._item import Scored
from mlpipe.serving._metrics import EndpointLabels
from mlpipe.serving._oip_schema import openapi
from mlpipe.serving._schema import PredictRequest
from mlpipe.serving._stack import Layer

_RAW_PATH = "mlpipe.raw_path"  # the scope's path while BentoML's metrics see its label


class Batcher:
    """BentoML's adaptive batcher for the ``predict`` API, called without HTTP: by the
    gateway with one ``/predict`` request, by the protocol layer with a ``/v2`` request's
    rows.

    The queue is BentoML's ``CorkDispatcher`` (its adaptive batching: the latency model,
    the batch-size and latency limits, the 503 when a job would miss
    ``max_latency_ms``), wrapped around the API once (:meth:`bind`). BentoML's own
    ``batch_infer`` wrapped it again for every request (a ``functools.wraps`` and a
    closure a call) and sized every job through its container registry; a job here is
    one request, so its size is 1 (decision 042).
    """

    def __init__(self, api: str = "predict", window: int = 16) -> None:
        self.api = api
        self.window = window
        self.factory: ServiceAppFactory | None = None  # the app's, once bound to it
        self._infer: Callable[[PredictRequest], Awaitable[Scored]] | None = None

    def bind(
        self,
        score: Callable[[list[PredictRequest]], Awaitable[list[Scored]]],
        *,
        max_batch_size: int,
        max_latency_ms: int,
        observe: Callable[[int], None] | None = None,
    ) -> None:
        """Queue into a dispatcher of BentoML's that hands ``score`` each batch (after
        ``observe`` saw its size: BentoML's adaptive batch-size histogram)."""

        async def scored(batch: Sequence[PredictRequest]) -> list[Scored]:
            if observe is not None:
                observe(len(batch))
            return await score(list(batch))

        dispatcher: CorkDispatcher[PredictRequest, Scored] = CorkDispatcher(
            max_latency_in_ms=max_latency_ms,
            max_batch_size=max_batch_size,
            fallback=_overloaded,
            get_batch_size=_one_request,
        )
        # its fallback raises, so a job is answered with a result or an exception
        self._infer = cast("Callable[[PredictRequest], Awaitable[Scored]]", dispatcher(scored))

    def bind_factory(self, factory: ServiceAppFactory) -> None:
        """:meth:`bind` to the API as BentoML's factory serves it (:class:`_FactoryApi`)."""
        self.factory = factory
        api = _FactoryApi(factory, self.api)
        method = factory.service.apis[self.api]
        self.bind(
            api.score,
            max_batch_size=method.max_batch_size,
            max_latency_ms=method.max_latency_ms,
            observe=api.observe,
        )

    async def __call__(self, reqs: Sequence[PredictRequest]) -> list[Scored]:
        """Each request's result, in order, every request a job of its own in the batcher's
        queue (as a ``/predict`` is), at most ``window`` (the API's ``max_batch_size``) at a
        time, the next ones queued when those are done.

        One job of many rows would be split over batches, but BentoML's latency model
        counts jobs, not rows: after a 1,024-row neighbour it held small requests back
        (539 against 4,074 req/s at c=8, decision 024). Queued all at once, the rows
        would run ahead of every request that came after them; a window at a time,
        those requests get into the batches between windows.
        """
        if self._infer is None:
            raise RuntimeError("the batcher is not bound: bind() it, as the service's app does")
        if len(reqs) == 1:  # a /predict: no task to gather
            return [await self._one(reqs[0])]
        results: list[Scored] = []
        for start in range(0, len(reqs), self.window):
            part = reqs[start : start + self.window]
            done = await asyncio.gather(*(self._one(r) for r in part), return_exceptions=True)
            failed = next((d for d in done if isinstance(d, BaseException)), None)
            if failed is not None:
                raise failed
            results += cast("list[Scored]", done)
        return results

    async def _one(self, req: PredictRequest) -> Scored:
        """``req``'s result from the dispatcher, a cancellation of the caller's kept one.

        BentoML's wrapper answers a job the dispatcher dropped with its fallback (503),
        but catches any ``CancelledError`` to tell, the caller's own too: a request
        cancelled while queued (its deadline, 504, or a client gone) came back as
        "overloaded". The caller's task still counts that cancellation
        (``Task.cancelling``), so it is raised again.
        """
        assert self._infer is not None
        try:
            return await self._infer(req)
        except ServiceUnavailable:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from None
            raise


class _FactoryApi:
    """A batchable API of BentoML's factory, as its ``batch_infer`` calls it."""

    def __init__(self, factory: ServiceAppFactory, api: str) -> None:
        self.factory = factory
        self.api = api
        self._sizes: Any = None  # the labelled histogram, made at the first batch as BentoML's

    def score(self, batch: list[PredictRequest]) -> Awaitable[list[Scored]]:
        """The service instance's method (there once the app has started) on ``batch``."""
        method = getattr(self.factory._service_instance, self.api).local
        return cast("Awaitable[list[Scored]]", method(batch))

    def observe(self, size: int) -> None:
        """Count a batch of ``size`` in BentoML's adaptive batch-size histogram."""
        if not self.factory.enable_metrics:
            return
        if self._sizes is None:
            self._sizes = self.factory.adaptive_batch_size_hist.labels(
                runner_name=self.factory.service.name,
                worker_index=server_context.worker_index,
                method_name=self.api,
                service_version=server_context.bento_version,
                service_name=server_context.bento_name,
            )
        self._sizes.observe(size)


def _overloaded() -> Scored:
    """The dispatcher's answer for a job it dropped: BentoML's 503, as its factory's."""
    raise ServiceUnavailable("process is overloaded")


def _one_request(_: PredictRequest) -> int:
    return 1


class ScoringAppFactory(ServiceAppFactory):  # type: ignore[misc]  # bentoml is untyped
    """BentoML's app factory with :class:`Deadline` and :class:`RouteMetrics` where its
    timeout and traffic-metrics middleware stood (each keeps their options), and without
    its OpenTelemetry middleware unless ``tracing``: with every URL excluded it still
    looked each request's URL up, 1.058 × the requests a worker served without it
    (decision 041)."""

    def __init__(
        self,
        service: bentoml.Service[Any],
        *,
        is_main: bool,
        tracing: bool,
        traffic: RouteTraffic | None = None,
    ) -> None:
        super().__init__(service, is_main=is_main)
        self.tracing = tracing
        self.traffic = traffic

    @property
    def middlewares(self) -> list[Middleware]:
        return [
            self._ours(m)
            for m in super().middlewares
            if self.tracing or m.cls is not OpenTelemetryMiddleware
        ]

    def _ours(self, middleware: Middleware) -> Middleware:
        """``middleware``, or mlpipe's in its place (:data:`_REPLACEMENTS`) with its options
        (and, for :class:`RouteMetrics`, the :class:`RouteTraffic` it registers with)."""
        replacement: Any = _REPLACEMENTS.get(middleware.cls)
        if replacement is None:
            return middleware
        kwargs: dict[str, Any] = dict(middleware.kwargs)
        if replacement is RouteMetrics and self.traffic is not None:
            kwargs["traffic"] = self.traffic
        return Middleware(replacement, *middleware.args, **kwargs)


def scoring_service_class(
    outer: Layer, batcher: Batcher, *, tracing: bool, traffic: RouteTraffic | None = None
) -> type[bentoml.Service[Any]]:
    """The ``service_class`` for ``@bentoml.service``: its app is :class:`ScoringAppFactory`'s
    (with OpenTelemetry's middleware only if ``tracing``, its route metrics registered with
    ``traffic``), inside ``outer``, and ``batcher`` keeps the factory (to call its
    batcher)."""

    class ScoringService(bentoml.Service[Any]):  # type: ignore[misc]  # bentoml is untyped
        def to_asgi(self, is_main: bool = True) -> ASGIApp:
            self.inject_config()  # what bentoml.Service.to_asgi does first
            factory = ScoringAppFactory(self, is_main=is_main, tracing=tracing, traffic=traffic)
            batcher.bind_factory(factory)
            app: ASGIApp = outer.cls(factory(), **outer.kwargs)
            return app

    return ScoringService


def bind_once(instance: object, name: str) -> None:
    """Keep the API method BentoML binds to ``instance`` on the instance itself.

    The batcher looks the method up on the instance for every batch, as BentoML's
    ``batch_infer`` does (through its HTTP route, for every request), and each lookup builds a new
    wrapper around ``inspect.signature`` (6 % of a worker's CPU at 32
    connections when it was per request). The binding never changes, so the
    first is kept: an instance attribute wins over the (non-data) descriptor.
    """
    descriptor = type(instance).__dict__[name]
    setattr(instance, name, descriptor.__get__(instance, type(instance)))


def span_headers() -> list[tuple[bytes, bytes]]:
    """``X-BentoML-Request-ID``, the span id BentoML's route adds to answers when tracing."""
    span = trace_context.request_id
    return [] if span is None else [(b"x-bentoml-request-id", format(span, "016x").encode())]


class RouteMetrics:
    """BentoML's traffic metrics, labelled with the route's template instead of the path,
    each route's labelled series made once.

    The series are BentoML's own (``<namespace>_request_total``,
    ``_request_duration_seconds``, ``_request_in_progress``,
    ``_last_request_timestamp_seconds``: the objects its
    ``RunnerTrafficMetricsMiddleware`` creates, with its labels and values), recorded
    here for HTTP requests the way its middleware records them. Its middleware
    looked every series up by its labels four times a request (``labels()``); with
    the metrics left out, a worker served 1.22 × the requests (decision 041). A
    WebSocket connection and the lifespan go through BentoML's middleware itself,
    shown the label as the path. Routes are the app's (BentoML's router:
    ``/predict``, ``/livez``, ``/metrics``...) and ``extra_routes``, the ``/v2``
    routes mlpipe's own layer answers before the router.
    """

    extra_routes: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
        (t, compile_path(t)[0]) for t in openapi("ErrorBody")[0]
    )

    def __init__(
        self, app: ASGIApp, *, traffic: RouteTraffic | None = None, **options: Any
    ) -> None:
        self.app = app
        self._metrics = RunnerTrafficMetricsMiddleware(self._restore_path, **options)
        self._labels: EndpointLabels | None = None
        self._series: dict[str, _RouteSeries] = {}
        if traffic is not None:
            traffic.metrics = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._through_bentomls(scope, receive, send)
            return
        label = self._label(scope)
        if label == "/metrics":  # BentoML counts no scrape
            await self.app(scope, receive, send)
            return
        series = self.series(label)
        series.began()
        start = time.perf_counter()
        status = 0

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                series.answered(status, max(time.perf_counter() - start, 0.0))
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            series.ended()

    def series(self, label: str) -> _RouteSeries:
        """The series of the route ``label`` (a template: ``/predict``), made once."""
        return self._series.get(label) or self._new_series(label)

    def _new_series(self, label: str) -> _RouteSeries:
        if not self._metrics._is_setup:
            self._metrics._setup()  # BentoML's: creates the metrics (and each route's zeros)
        skipped = label.startswith(tuple(self._metrics.skip_paths))
        series = _RouteSeries(self._metrics, label, stamped=not skipped)
        self._series[label] = series
        return series

    async def _through_bentomls(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            label = self._label(scope)
            if label != scope["path"]:
                scope[_RAW_PATH], scope["path"] = scope["path"], label
        await self._metrics(scope, receive, send)

    def _label(self, scope: Scope) -> str:
        if self._labels is None:  # the app's routes are known once it is called
            routes = [(r.path, r.path_regex) for r in scope["app"].routes if hasattr(r, "path")]
            self._labels = EndpointLabels([*routes, *self.extra_routes])
        return self._labels(scope["path"])

    async def _restore_path(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _RAW_PATH in scope:
            scope["path"] = scope.pop(_RAW_PATH)
        await self.app(scope, receive, send)


class RouteTraffic:
    """Where BentoML's traffic series of a route are found for the requests the app never
    sees: those the predict lane answers (:mod:`mlpipe.serving._lane`). The app's
    :class:`RouteMetrics` registers itself here when Starlette builds it, at the worker's
    start (the lifespan's first pass through the app); until then there are none."""

    def __init__(self) -> None:
        self.metrics: RouteMetrics | None = None

    def series(self, label: str) -> _RouteSeries | None:
        return None if self.metrics is None else self.metrics.series(label)


class _RouteSeries:
    """One route's labelled series of BentoML's traffic metrics, looked up once.

    Each write of a series in Prometheus's multiprocess mode takes a lock, asks the
    kernel for the process id and writes the value's file: BentoML's middleware
    made five a request. The requests in progress, the count of each status and
    the last request's time are summed here and written once a turn of the event
    loop (:meth:`flush`: a batch's answers all go out in one turn), so ``/metrics``
    reads what it did, at most that turn later; the duration is observed per
    request (decision 042).
    """

    def __init__(self, metrics: Any, endpoint: str, *, stamped: bool) -> None:
        names = {
            "service_name": server_context.bento_name,
            "service_version": server_context.bento_version,
            "runner_name": server_context.service_name,
        }
        self._metrics, self._endpoint, self._names = metrics, endpoint, names
        self.in_progress = metrics.metrics_request_in_progress.labels(endpoint=endpoint, **names)
        self.last_request = (
            metrics.metrics_last_request_timestamp.labels(**names) if stamped else None
        )
        self._by_status: dict[int, tuple[Any, Any]] = {}
        # not written yet: requests begun less those ended, the latest arrival, answers
        self._in_progress = 0
        self._arrived: float | None = None
        self._answers: dict[int, int] = {}
        self._flush_due = False

    def began(self) -> None:
        """A request arrived."""
        self._in_progress += 1
        if self.last_request is not None:
            self._arrived = time.time()
        self._due()

    def ended(self) -> None:
        """A request is done (answered or not)."""
        self._in_progress -= 1
        self._due()

    def answered(self, status: int, seconds: float) -> None:
        """Count a request answered with ``status`` and observe how long it took."""
        self._answers[status] = self._answers.get(status, 0) + 1
        self._of(status)[1].observe(seconds)
        self._due()

    def flush(self) -> None:
        """Write what was summed since the last flush."""
        self._flush_due = False
        if self._in_progress:
            self.in_progress.inc(self._in_progress)
            self._in_progress = 0
        if self._arrived is not None and self.last_request is not None:
            self.last_request.set(self._arrived)
            self._arrived = None
        for status, count in self._answers.items():
            self._of(status)[0].inc(count)
        self._answers.clear()

    def _due(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self.flush, context=NO_CONTEXT)

    def _of(self, status: int) -> tuple[Any, Any]:
        pair = self._by_status.get(status)
        if pair is None:
            labels = {"endpoint": self._endpoint, "http_response_code": status, **self._names}
            pair = (
                self._metrics.metrics_request_total.labels(**labels),
                self._metrics.metrics_request_duration.labels(**labels),
            )
            self._by_status[status] = pair
        return pair


# BentoML's middleware -> mlpipe's, in its place (ScoringAppFactory)
_REPLACEMENTS: dict[Any, Any] = {
    TimeoutMiddleware: Deadline,
    RunnerTrafficMetricsMiddleware: RouteMetrics,
}


def configure_worker_logging() -> None:
    """BentoML's logging for a server's worker (its format, levels and handler on stderr),
    leaving the loggers made before it enabled: ``mlpipe.serving``'s are, as the worker is
    a module of that package (BentoML's own worker configures before importing anything)."""
    logging.config.dictConfig({**SERVER_LOGGING_CONFIG, "disable_existing_loggers": False})


def enter_worker_context(service: bentoml.Service[Any], worker_id: int) -> None:
    """Fill BentoML's server context as its worker does before building the app: the
    worker's index (mlpipe's service reads it), the names its metrics are labelled with."""
    server_context.worker_index = worker_id
    server_context.service_type = "entry_service"
    server_context.service_name = service.name
    server_context.service_routes = [
        join_paths(service.path_prefix, api.route) for api in service.apis.values()
    ]
    tag = service.bento.tag if service.bento is not None else None
    server_context.bento_name = tag.name if tag is not None else service.name
    server_context.bento_version = (tag.version if tag is not None else None) or "not available"


def fresh_metrics_dir() -> str:
    """BentoML's Prometheus multiprocess directory, emptied: what a server's arbiter does
    before its workers start (each worker's metrics go there, ``/metrics`` reads them all)."""
    directory: str = ensure_prometheus_dir()
    return directory


__all__ = [
    "Batcher",
    "RouteMetrics",
    "RouteTraffic",
    "ScoringAppFactory",
    "bind_once",
    "configure_worker_logging",
    "enter_worker_context",
    "fresh_metrics_dir",
    "scoring_service_class",
    "span_headers",
]
