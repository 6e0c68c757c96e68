"""The demo: the whole loop on a fresh embedded stack, and the scaffolding it is built from.

``mlpipe demo`` (:func:`run`) generates a synthetic transaction stream
(:func:`generate`), trains the example fraud model on point-in-time training
sets (:func:`train_lightgbm`), registers, deploys, promotes and rolls it back,
and with a scoring service running sends it traffic (:func:`send`). Tests and
benchmarks use the same pieces. None of this is part of the platform proper:
nothing below this layer imports it.
"""

from mlpipe.demo._loop import DEMO_DIR, MODEL, DemoEvent, run
from mlpipe.demo._traffic import TrafficResult, fraud_requests, send, wait_for_generation
from mlpipe.demo._training import TrainedModel, train_lightgbm
from mlpipe.demo._transactions import GeneratedData, generate

__all__ = [
    "DEMO_DIR",
    "MODEL",
    "DemoEvent",
    "GeneratedData",
    "TrafficResult",
    "TrainedModel",
    "fraud_requests",
    "generate",
    "run",
    "send",
    "train_lightgbm",
    "wait_for_generation",
]
