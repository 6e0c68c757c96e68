"""The request path behind ``bentos/scoring``: the stack, the gateway, the pipeline, the launcher.

``bentos/scoring/service.py`` holds BentoML glue only and imports from here;
everything it does per request lives in this package, so it can be tested
without a server. The order of the middleware, and why, is in
:mod:`mlpipe.serving._stack`.
"""

from typing import TYPE_CHECKING, Any

from mlpipe.serving._admission import Admission, InflightBoard, ReadyBoard
from mlpipe.serving._auth import UNAUTHORIZED, AuthGateway, Keys, SecurityMetrics, security_metrics
from mlpipe.serving._context import DEFAULT_TENANT
from mlpipe.serving._deadline import Deadline
from mlpipe.serving._gateway import Batch, PredictGateway
from mlpipe.serving._generations import READY_LOG, GenerationLoader, ServingModel, VersionPlan
from mlpipe.serving._intake import RequestIntake
from mlpipe.serving._lane import PredictLane
from mlpipe.serving._metrics import ServingMetrics, serving_metrics
from mlpipe.serving._oip import InferenceProtocol
from mlpipe.serving._overload import FrontDoor, OverloadGate, ReadinessGate
from mlpipe.serving._pipeline import ScoringPipeline
from mlpipe.serving._runtime import RuntimeSlot, ServingRuntime
from mlpipe.serving._schema import PredictRequest, PredictResponse
from mlpipe.serving._server import (
    MLPIPE_WORKER,
    SERVICE,
    WORKER_ENV,
    ScoringProcess,
    exec_server,
    free_port,
    server_command,
    service_dir,
    unguarded_worker,
)
from mlpipe.serving._stack import Layer, front_door, predict_lane, request_stack

if TYPE_CHECKING:
    from mlpipe.serving._bentoml_private import (
        Batcher,
        RouteTraffic,
        bind_once,
        scoring_service_class,
        span_headers,
    )

# `_bentoml_private` imports bentoml (seconds), which `mlpipe serve` and the demo, importing
# this package for the launcher, must not pay: its names load on first use.
_BENTOML_GLUE = frozenset(
    {
        "Batcher",
        "RouteTraffic",
        "bind_once",
        "scoring_service_class",
        "span_headers",
    }
)


def __getattr__(name: str) -> Any:
    if name in _BENTOML_GLUE:
        from mlpipe.serving import _bentoml_private

        return getattr(_bentoml_private, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TENANT",
    "MLPIPE_WORKER",
    "READY_LOG",
    "SERVICE",
    "UNAUTHORIZED",
    "WORKER_ENV",
    "Admission",
    "AuthGateway",
    "Batch",
    "Batcher",
    "Deadline",
    "FrontDoor",
    "GenerationLoader",
    "InferenceProtocol",
    "InflightBoard",
    "Keys",
    "Layer",
    "OverloadGate",
    "PredictGateway",
    "PredictLane",
    "PredictRequest",
    "PredictResponse",
    "ReadinessGate",
    "ReadyBoard",
    "RequestIntake",
    "RouteTraffic",
    "RuntimeSlot",
    "ScoringPipeline",
    "ScoringProcess",
    "SecurityMetrics",
    "ServingMetrics",
    "ServingModel",
    "ServingRuntime",
    "VersionPlan",
    "bind_once",
    "exec_server",
    "free_port",
    "front_door",
    "predict_lane",
    "request_stack",
    "scoring_service_class",
    "security_metrics",
    "server_command",
    "service_dir",
    "serving_metrics",
    "span_headers",
    "unguarded_worker",
]
