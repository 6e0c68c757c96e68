"""The request path behind ``bentos/scoring``: contract, gateway, pipeline, caches, metrics.

``bentos/scoring/service.py`` holds BentoML glue only; everything it does per
request lives here, so it can be tested without a server.
"""

from mlpipe.serving.gateway import PredictGateway
from mlpipe.serving.generations import GenerationLoader, ServingModel, VersionPlan
from mlpipe.serving.pipeline import ScoringPipeline
from mlpipe.serving.runtime import ServingRuntime, current, set_current
from mlpipe.serving.schema import PredictRequest, PredictResponse

__all__ = [
    "GenerationLoader",
    "PredictGateway",
    "PredictRequest",
    "PredictResponse",
    "ScoringPipeline",
    "ServingModel",
    "ServingRuntime",
    "VersionPlan",
    "current",
    "set_current",
]
