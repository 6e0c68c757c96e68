"""The mlpipe scoring service: BentoML glue around :mod:`mlpipe.serving`.

One batchable API does the whole request path for a batch (features in one
online-store call per feature service, scoring per version group, one log
append), behind the :class:`~mlpipe.serving.PredictGateway` middleware that
keeps the single-object ``/predict`` contract. Settings come from the
environment (``MLPIPE_HOME``, ``MLPIPE_PROFILE``, ``MLPIPE_SERVING__*``), which
``mlpipe serve`` sets for the server process.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import bentoml
from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.server.http import traffic as _bentoml_traffic

from mlpipe.config import load_settings
from mlpipe.features.unchecked import skip_feast_type_checks
from mlpipe.serving import PredictGateway, PredictRequest, ServingRuntime, set_current
from mlpipe.serving.auth import AuthGateway
from mlpipe.serving.deadline import Deadline
from mlpipe.serving.intake import RequestIntake
from mlpipe.serving.oip import InferenceProtocol
from mlpipe.serving.overload import (
    FrontDoor,
    InflightBoard,
    OverloadGate,
    saturated,
    share_with_workers,
)

settings = load_settings()
_s = settings.serving

# Before the runtime imports Feast: its type checks cost seconds of every worker's start-up.
skip_feast_type_checks()

# BentoML builds its app with whatever this name holds when a worker starts. Its own
# TimeoutMiddleware keeps every request's context alive for the whole timeout, which
# made the GC stalls that set the p99; Deadline keeps its 504 contract without that.
_bentoml_traffic.TimeoutMiddleware = Deadline  # type: ignore[misc]

logging.getLogger("mlpipe").setLevel(logging.INFO)
# Models fitted on DataFrames warn on every array predict; the pipeline passes
# arrays in the registered feature order on purpose.
warnings.filterwarnings("ignore", message="X does not have valid feature names")


@bentoml.service(
    name="mlpipe-scoring",
    workers=_s.workers,
    # BentoML's own cut-off stays behind mlpipe's (504, logged as a timeout) so ours decides
    traffic={"timeout": _s.request_timeout_s + 5},
    logging={"access": {"enabled": False}},
    # Tracing off: the middleware's span bookkeeping was ~10 % of a worker's CPU under load.
    tracing={} if _s.tracing else {"excluded_urls": [".*"]},
    endpoints={"livez": "/livez", "readyz": "/readyz"},
)
class Scoring:
    """Gateway and model runner in one process per worker (measured fastest on CPU)."""

    def __init__(self) -> None:
        _share_inflight()
        self.runtime = ServingRuntime(settings).start()
        set_current(self.runtime)
        _bind_once(self, "predict")

    @bentoml.api(
        route="/predict",
        batchable=True,
        max_batch_size=_s.max_batch_size,
        max_latency_ms=_s.max_latency_ms,
    )
    async def predict(self, requests: list[PredictRequest], /) -> list[dict[str, Any]]:
        """Score the batch on the worker's event loop, not in BentoML's thread pool.

        The batch is CPU work under the GIL either way, so the loop loses no
        concurrency; in a thread each batch also waited for a worker thread to
        wake and for the loop to wake again with its answer. Open loop, where
        batches are small, that was ~1 more context switch a request, and the
        p99 was lower on the loop in 9 of 12 paired rounds at 35-80 % load
        (bench/README.md, "Batches on the event loop").
        """
        return self.runtime.pipeline.predict_batch(requests)

    def __is_ready__(self) -> bool:
        return self.runtime.ready and not saturated()

    @bentoml.on_shutdown
    def shutdown(self) -> None:
        set_current(None)
        self.runtime.close()


def _share_inflight() -> None:
    """With several workers, hold ``max_inflight`` over the server (:mod:`mlpipe.serving.overload`).

    The file is named after the server's address, and its slot 0 after the process
    that started this worker (BentoML's arbiter, which restarts a worker under the
    same index), so a crashed worker's slot is taken over by its replacement.
    """
    worker = bentoml.server_context.worker_index
    if _s.workers < 2 or worker is None:
        return
    path = settings.state_path / "serving" / f"inflight-{_s.host}-{_s.port}"
    board = InflightBoard(path, workers=_s.workers, worker=worker, server_pid=os.getppid())
    share_with_workers(board)


def _bind_once(instance: object, name: str) -> None:
    """Keep the API method BentoML binds to ``instance`` on the instance itself.

    BentoML looks the method up on the instance for every batch (``batch_infer``;
    through its HTTP route, for every request), and each lookup builds a new wrapper
    around ``inspect.signature`` (6 % of a worker's CPU at c=32 when it was per
    request, py-spy; bench/README.md). The binding never changes, so the first is
    kept: an instance attribute wins over the (non-data) descriptor.
    """
    descriptor = type(instance).__dict__[name]
    setattr(instance, name, descriptor.__get__(instance, type(instance)))


# The first added is the outermost: keys and rate limits before the gateway parses;
# then the intake (JSON only, size, a deadline on the body) before anything reads a body.
Scoring.add_asgi_middleware(AuthGateway, settings=settings)
Scoring.add_asgi_middleware(
    RequestIntake, max_body_bytes=_s.max_body_bytes, timeout_s=_s.request_timeout_s
)
Scoring.add_asgi_middleware(InferenceProtocol, max_body_bytes=_s.max_body_bytes)  # /v2 → /predict
Scoring.add_asgi_middleware(
    OverloadGate,
    max_inflight=settings.reliability.max_inflight,
    retry_after_s=settings.reliability.retry_after_s,
    reconnect_every=settings.reliability.reconnect_every,
)


class _Batcher:
    """BentoML's adaptive batcher for ``predict``, called by the gateway without HTTP.

    Through BentoML's route every request was serialized again by the gateway,
    parsed and validated by BentoML, and its answer serialized by BentoML and
    unwrapped by the gateway: about half the server's CPU a request. The route's
    own batcher (``ServiceAppFactory.batch_infer``: the same queue, batch sizes
    and metrics) takes the validated request instead.
    """

    factory: ServiceAppFactory | None = None  # the worker's, set as BentoML builds the app

    async def __call__(self, req: PredictRequest) -> dict[str, Any]:
        assert self.factory is not None, "the gateway runs inside the app the factory built"
        (answer,) = await self.factory.batch_infer("predict", ([req],), {})
        return answer


def _span_headers() -> list[tuple[bytes, bytes]]:
    """``X-BentoML-Request-ID``, the span id BentoML's route adds to answers when tracing."""
    from bentoml._internal.context import trace_context

    span = trace_context.request_id
    return [] if span is None else [(b"x-bentoml-request-id", format(span, "016x").encode())]


_batcher = _Batcher()
Scoring.add_asgi_middleware(
    PredictGateway,
    batch=_batcher,
    max_body_bytes=_s.max_body_bytes,
    response_headers=_span_headers if _s.tracing else None,
)


# Above saturation a refusal that went through BentoML's middleware cost half a served
# request; in front of the whole app it is cheap enough for goodput to hold
# (mlpipe.serving.overload, bench/README.md "Shedding before the stack").
_to_asgi = bentoml.Service.to_asgi


def _to_asgi_behind_front_door(self: bentoml.Service[Any], is_main: bool = True) -> Any:
    if self is not Scoring:
        return _to_asgi(self, is_main)
    self.inject_config()  # what bentoml.Service.to_asgi does, keeping the factory
    _batcher.factory = ServiceAppFactory(self, is_main=is_main)
    return FrontDoor(_batcher.factory(), retry_after_s=settings.reliability.retry_after_s)


bentoml.Service.to_asgi = _to_asgi_behind_front_door  # type: ignore[method-assign]
