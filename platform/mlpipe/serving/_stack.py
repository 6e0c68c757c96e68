"""The scoring service's request stack, outermost first: the one place its order is set.

A request meets, in this order (before any of it, the worker's HTTP protocol,
:class:`~mlpipe.serving._header_guard.HeadGuard`, has bounded its head in size,
431, and time, 408, decision 025; and, while the server is saturated, answered
a scoring ``POST`` with the front door's 503 itself, from its head, through
:meth:`~mlpipe.serving.FrontDoor.shed`, decision 046):

1. :class:`~mlpipe.serving.FrontDoor`, around BentoML's whole app
   (:func:`front_door`). It refuses a scoring request (503) while the worker's
   :class:`~mlpipe.serving.Admission` is saturated, before anything else
   runs: a refusal that went through the layers below cost about half a
   served request, and above saturation those refusals took
   the CPU the admitted requests needed (decision 009).
2. BentoML's own middleware: its metrics (labelled by route, unknown paths as
   ``other``: :class:`~mlpipe.serving._bentoml_private.RouteMetrics`),
   OpenTelemetry (spans only when ``serving.tracing``; decision 013), and
   :class:`~mlpipe.serving.Deadline` where BentoML's ``TimeoutMiddleware``
   stood (decision 006; 504 at ``request_timeout_s`` + 5 s, behind the
   pipeline's own 504 at ``request_timeout_s``, which is logged).
3. mlpipe's layers, :func:`request_stack`'s list, which the service adds with
   ``add_asgi_middleware`` (BentoML puts the first added outermost):

   a. :class:`~mlpipe.serving.AuthGateway`: keys and tenant rate limits (401,
      429) first, so a request without a key or over its rate reads no body
      and costs nothing below; it names the tenant (and its pinned arm) for
      the log row and routing.
   b. :class:`~mlpipe.serving.ReadinessGate`: 503 (``Connection: close``, so
      the client reconnects, maybe to a ready worker) for a scoring request
      while the worker's models are loading; after auth, so a client without
      a key gets 401, not 503, whatever the worker's state (issue 29, item 10).
   c. :class:`~mlpipe.serving.RequestIntake`: before anything reads a body,
      on every path: JSON only (415), the size limit (413; the only place it
      is enforced, so it sits above both ``/predict`` and ``/v2``), the whole
      body within the request timeout (408); it stamps the arrival time the
      504 deadline and the logged latency count from.
   d. :class:`~mlpipe.serving.InferenceProtocol`: ``/v2`` in front of
      ``/predict``. An infer request's rows are checked as the gateway checks
      a ``/predict`` request, charged a token each and scored as one batch by
      the pipeline, all or none (decision 024): nothing below sees them.
   e. :class:`~mlpipe.serving.OverloadGate`: after the intake, so a client
      still sending its body holds no slot; it counts ``/predict`` requests in
      flight on the same :class:`~mlpipe.serving.Admission` as the front door
      and ``/readyz`` (decision 010).
   f. :class:`~mlpipe.serving.PredictGateway`, innermost: it parses and
      validates ``/predict`` (400, 404, 422) and hands it to BentoML's batcher
      directly, not through BentoML's HTTP route (decision 018). Everything else falls
      through to BentoML's routes (``/livez``, ``/readyz``, ``/metrics``, and
      ``/docs.json``, which it rewrites on the way out).

A ``POST /predict`` these layers would pass untouched (a JSON body of a
declared length, the worker ready and not saturated, tracing off) skips them
all: the worker's protocol hands it to the predict lane
(:class:`~mlpipe.serving.PredictLane`, :func:`predict_lane`), which judges its
key with the auth layer's :class:`~mlpipe.serving.Keys`, admits it with the
gateway's checks and scores the requests of one event-loop turn as one batch
(decision 047). Everything else goes through the stack above.

The layers share three things, each set in one place: the request's context
(:mod:`mlpipe.serving._context`: its route, matched once by the front door;
the caller, set by auth; the arrival, stamped by the intake), the worker's
runtime (a :class:`~mlpipe.serving.RuntimeSlot` every layer is given when it
is built, which the service fills once the runtime exists), and the statuses
of their refusals (:data:`~mlpipe.serving._error_bodies.HTTP_STATUS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from mlpipe.serving._admission import Admission
from mlpipe.serving._auth import AuthGateway, Keys
from mlpipe.serving._gateway import Batch, PredictGateway
from mlpipe.serving._intake import RequestIntake
from mlpipe.serving._lane import PredictLane, Traffic
from mlpipe.serving._oip import InferenceProtocol
from mlpipe.serving._overload import FrontDoor, OverloadGate, ReadinessGate
from mlpipe.serving._runtime import RuntimeSlot

if TYPE_CHECKING:
    from mlpipe.config import Settings


class Layer(NamedTuple):
    """One middleware: its class and the keyword arguments it is built with (after ``app``)."""

    cls: type[Any]
    kwargs: dict[str, Any]


def request_stack(
    settings: Settings,
    *,
    admission: Admission,
    batch: Batch,
    runtime: RuntimeSlot,
    span_headers: Callable[[], list[tuple[bytes, bytes]]] | None = None,
    ready: Callable[[], bool] | None = None,
    keys: Keys | None = None,
) -> list[Layer]:
    """mlpipe's layers inside BentoML's app, outermost first (the order in this module's doc).

    ``admission`` is the worker's, shared with :func:`front_door` and ``/readyz``;
    ``batch`` answers one request as part of a batch (BentoML's batcher);
    ``runtime`` is where the layers find the worker's runtime once the service has
    made it (they are built before it exists);
    ``span_headers`` gives the tracing headers the gateway adds to an answer
    when ``serving.tracing`` is on; ``ready`` says whether the worker's models are
    loaded (by default, whether the runtime in ``runtime`` is ready); ``keys`` are
    the worker's keys and rate limits, shared with the predict lane (:func:`predict_lane`).
    """
    s, r = settings.serving, settings.reliability
    return [
        Layer(AuthGateway, {"settings": settings, "keys": keys}),
        Layer(
            ReadinessGate, {"retry_after_s": r.retry_after_s, "runtime": runtime, "ready": ready}
        ),
        Layer(
            RequestIntake,
            {
                "max_body_bytes": s.max_body_bytes,
                "timeout_s": s.request_timeout_s,
                "runtime": runtime,
            },
        ),
        Layer(InferenceProtocol, {"runtime": runtime, "batch": batch}),
        Layer(
            OverloadGate,
            {
                "admission": admission,
                "retry_after_s": r.retry_after_s,
                "reconnect_every": r.reconnect_every,
                "runtime": runtime,
            },
        ),
        Layer(
            PredictGateway,
            {
                "runtime": runtime,
                "batch": batch,
                "response_headers": span_headers if s.tracing else None,
            },
        ),
    ]


def front_door(
    settings: Settings,
    admission: Admission,
    runtime: RuntimeSlot,
    lane: PredictLane | None = None,
) -> Layer:
    """The layer around BentoML's whole app, on the worker's ``admission``; it makes each
    request's context (:mod:`mlpipe.serving._context`), so the path is matched once, and
    hands the worker's protocol its ``lane``."""
    return Layer(
        FrontDoor,
        {
            "admission": admission,
            "retry_after_s": settings.reliability.retry_after_s,
            "runtime": runtime,
            "lane": lane,
        },
    )


def predict_lane(
    settings: Settings, *, admission: Admission, runtime: RuntimeSlot, keys: Keys, traffic: Traffic
) -> PredictLane | None:
    """The worker's predict lane (decision 047), on the stack's ``admission``, ``runtime``
    and ``keys``, counting in BentoML's ``traffic`` series; None with ``serving.lane``
    off, or ``serving.tracing`` on (the lane makes no spans)."""
    s, r = settings.serving, settings.reliability
    if not s.lane or s.tracing:
        return None
    return PredictLane(
        admission=admission,
        runtime=runtime,
        keys=keys,
        traffic=traffic,
        max_body_bytes=s.max_body_bytes,
        timeout_s=s.request_timeout_s,
        max_batch_size=s.max_batch_size,
        retry_after_s=r.retry_after_s,
        reconnect_every=r.reconnect_every,
    )


__all__ = ["Layer", "front_door", "predict_lane", "request_stack"]
