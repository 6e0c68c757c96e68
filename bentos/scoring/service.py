"""The mlpipe scoring service: BentoML glue around :mod:`mlpipe.serving`.

One batchable API does the whole request path for a batch (features in one
online-store call per feature service, scoring per version group, one log
append), behind the middleware of :func:`mlpipe.serving.request_stack` (its
order, and why, is documented there once), inside the front door. Settings come
from the environment (``MLPIPE_HOME``, ``MLPIPE_PROFILE``, ``MLPIPE_SERVING__*``),
which ``mlpipe serve`` sets for the server process.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import bentoml
from starlette.exceptions import HTTPException

from mlpipe.config import load_settings
from mlpipe.serving import (
    WORKER_ENV,
    Admission,
    Batcher,
    InflightBoard,
    Keys,
    PredictRequest,
    ReadyBoard,
    RouteTraffic,
    RuntimeSlot,
    ServingRuntime,
    bind_once,
    front_door,
    predict_lane,
    request_stack,
    scoring_service_class,
    span_headers,
    unguarded_worker,
)

settings = load_settings()
_s = settings.serving

logging.getLogger("mlpipe").setLevel(logging.INFO)
# Models fitted on DataFrames warn on every array predict; the pipeline passes
# arrays in the registered feature order on purpose.
warnings.filterwarnings("ignore", message="X does not have valid feature names")

# This worker's requests in flight: the front door, the overload gate and /readyz share it.
admission = Admission(settings.reliability.max_inflight)
batcher = Batcher("predict", window=_s.max_batch_size)
# Where the request layers, built at import, find this worker's runtime: filled in __init__.
runtime = RuntimeSlot()
# The keys and rate limits the auth layer and the predict lane both judge by, and where the
# lane finds BentoML's traffic series once the app has made them (decision 047).
keys = Keys(settings)
traffic = RouteTraffic()
lane = predict_lane(settings, admission=admission, runtime=runtime, keys=keys, traffic=traffic)


@bentoml.service(
    name="mlpipe-scoring",
    workers=_s.workers,
    # BentoML's own cut-off stays behind mlpipe's (504, logged as a timeout) so ours decides
    traffic={"timeout": _s.request_timeout_s + 5},
    logging={"access": {"enabled": False}},
    # Tracing off: the middleware's span bookkeeping was ~10 % of a worker's CPU (decision 013).
    tracing={} if _s.tracing else {"excluded_urls": [".*"]},
    endpoints={"livez": "/livez", "readyz": "/readyz"},
    # Workers run optimized, where typeguard's decorator is a no-op by design: Feast's
    # run-time type checks cost ~2.6 s of every worker's start (decisions 011, 038). mlpipe's
    # arbiter, and BentoML's under `bentoml serve`, give the workers these unless the
    # environment sets them (PYTHONOPTIMIZE=0: on).
    envs=[{"name": name, "value": value} for name, value in WORKER_ENV.items()],
    # The app inside the front door, with mlpipe's Deadline and route-labelled metrics in the
    # places of BentoML's timeout and traffic-metrics middleware, OpenTelemetry's only with
    # tracing on (decisions 006, 009, 037, 041).
    service_class=scoring_service_class(
        front_door(settings, admission, runtime, lane), batcher, tracing=_s.tracing, traffic=traffic
    ),
)
class Scoring:
    """Gateway and model runner in one process per worker (decision 001)."""

    def __init__(self) -> None:
        if (unguarded := unguarded_worker()) is not None:
            logging.getLogger("mlpipe.serving").warning(unguarded)
        _share_inflight()
        self.runtime = ServingRuntime(settings)
        _share_readiness(self.runtime)
        self.runtime.start()
        runtime.runtime = self.runtime
        bind_once(self, "predict")

    @bentoml.api(
        route="/predict",
        batchable=True,
        max_batch_size=_s.max_batch_size,
        max_latency_ms=_s.max_latency_ms,
    )
    async def predict(self, requests: list[PredictRequest], /) -> list[Any]:
        """Score the batch on the worker's event loop, not in BentoML's thread pool.

        The gateway (``/predict``, one request) and the protocol layer (``/v2``, the
        rows of an infer request) call this through BentoML's batcher, never over
        HTTP: each request's answer, or a ``/v2`` row's scored item, which the protocol
        layer answers and logs with the request's other rows (decision 024).

        The batch is CPU work under the GIL either way, so the loop loses no
        concurrency; in a thread each batch also waited for a worker thread to
        wake and for the loop to wake again with its answer, about one more
        context switch a request, which showed in the p99 under open-loop load
        (decision 019).
        """
        return await self.runtime.pipeline.predict_batch_async(requests)

    def __is_ready__(self) -> bool:
        """True, or ``/readyz`` answers 503 saying why: loading (this worker or, with
        several, another: :func:`_share_readiness`), a model it cannot load (named, with
        the reason), or saturated. BentoML's own 503 names no reason, so
        the reason goes in an HTTPException, which Starlette answers as plain text."""
        problem = self.runtime.readiness_problem()
        if problem is None and (refusal := admission.refusal()):
            problem = str(refusal)
        if problem is not None:
            raise HTTPException(503, f"not ready: {problem}")
        return True

    @bentoml.on_shutdown
    def shutdown(self) -> None:
        runtime.runtime = None
        self.runtime.close()


def _share_inflight() -> None:
    """With several workers, hold ``max_inflight`` over the server (:class:`InflightBoard`).

    The file is named after the server's address, and its slot 0 after the process
    that started this worker (BentoML's arbiter, which restarts a worker under the
    same index), so a crashed worker's slot is taken over by its replacement.
    """
    worker = bentoml.server_context.worker_index
    if _s.workers < 2 or worker is None:
        return
    path = settings.state_path / "serving" / f"inflight-{_s.host}-{_s.port}"
    board = InflightBoard(path, workers=_s.workers, worker=worker, server_pid=os.getppid())
    admission.share_with_workers(board)


def _share_readiness(runtime: ServingRuntime) -> None:
    """With several workers, be ready only once all of them are (:class:`ReadyBoard`).

    Whichever worker takes a connection answers ``/readyz``: per worker, the port
    said 200 while a sibling still loading refused requests with 503 for about a
    second after a start (issue 29, item 10). Named as the inflight board is.
    """
    worker = bentoml.server_context.worker_index
    if _s.workers < 2 or worker is None:
        return
    path = settings.state_path / "serving" / f"ready-{_s.host}-{_s.port}"
    runtime.share_readiness(
        ReadyBoard(path, workers=_s.workers, worker=worker, server_pid=os.getppid())
    )


for cls, kwargs in request_stack(
    settings,
    admission=admission,
    batch=batcher,
    runtime=runtime,
    span_headers=span_headers,
    keys=keys,
):
    Scoring.add_asgi_middleware(cls, **kwargs)
