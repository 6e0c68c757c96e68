"""Every use of BentoML's private API, in one file.

bentoml is pinned (1.4.x). What this module touches is not BentoML's public
API, so an upgrade may move or change it; ``tests/unit/serving/test_bentoml_patches.py``
asserts that each name still exists with the signature used here, so an
upgrade fails there, loudly, rather than in a running server.

- :func:`use_deadline`: BentoML builds each worker's app with whatever
  ``bentoml._internal.server.http.traffic.TimeoutMiddleware`` holds then; its
  own keeps every request's context alive for the whole timeout, and the GC
  stalls that made set the p99. :class:`~mlpipe.serving.Deadline` keeps its
  504 contract without that (decision 006).
- :class:`Batcher`: the gateway hands a validated request to the ``predict``
  API's adaptive batcher (``ServiceAppFactory.batch_infer``: the same queue,
  batch sizes and metrics as BentoML's route) without BentoML's HTTP route,
  which serialized, parsed and validated every request again and serialized
  its answer: about half the server's CPU a request (decision 018).
- :func:`build_app_inside`: ``bentoml.Service.to_asgi`` replaced, for one
  service, by the same build that keeps the ``ServiceAppFactory`` (for the
  batcher) and wraps the app in a layer of mlpipe's (the front door, decision 009).
- :func:`bind_once`: BentoML looks the API method up on the instance for every
  batch, and each lookup builds a new wrapper around ``inspect.signature``
  (decision 014).
- :func:`span_headers`: the ``X-BentoML-Request-ID`` header BentoML's route
  adds when tracing, from its trace context.

This module imports bentoml (seconds); :mod:`mlpipe.serving` loads it only when
one of these names is first asked for, which only the service does.
"""

from __future__ import annotations

from typing import Any

import bentoml
from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.context import trace_context
from bentoml._internal.server.http import traffic as _bentoml_traffic

from mlpipe.serving._asgi import ASGIApp
from mlpipe.serving._deadline import Deadline
from mlpipe.serving._schema import PredictRequest
from mlpipe.serving._stack import Layer


def use_deadline() -> None:
    """Have BentoML build every app from now on with :class:`Deadline` as its timeout middleware."""
    _bentoml_traffic.TimeoutMiddleware = Deadline  # type: ignore[misc,assignment]


class Batcher:
    """BentoML's adaptive batcher for the ``predict`` API, called by the gateway without HTTP."""

    factory: ServiceAppFactory | None = None  # the worker's, set as BentoML builds the app

    def __init__(self, api: str = "predict") -> None:
        self.api = api

    async def __call__(self, req: PredictRequest) -> dict[str, Any]:
        assert self.factory is not None, "the gateway runs inside the app the factory built"
        (answer,) = await self.factory.batch_infer(self.api, ([req],), {})
        return answer


def build_app_inside(service: bentoml.Service[Any], outer: Layer, batcher: Batcher) -> None:
    """Make BentoML build ``service``'s app inside ``outer``, keeping the factory for ``batcher``.

    Every other service is built as BentoML builds it.
    """
    bentoml_to_asgi = bentoml.Service.to_asgi

    def to_asgi(self: bentoml.Service[Any], is_main: bool = True) -> ASGIApp:
        if self is not service:
            return bentoml_to_asgi(self, is_main)
        self.inject_config()  # what bentoml.Service.to_asgi does, keeping the factory
        batcher.factory = ServiceAppFactory(self, is_main=is_main)
        return outer.cls(batcher.factory(), **outer.kwargs)

    bentoml.Service.to_asgi = to_asgi


def bind_once(instance: object, name: str) -> None:
    """Keep the API method BentoML binds to ``instance`` on the instance itself.

    BentoML looks the method up on the instance for every batch (``batch_infer``;
    through its HTTP route, for every request), and each lookup builds a new
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


__all__ = ["Batcher", "bind_once", "build_app_inside", "span_headers", "use_deadline"]
