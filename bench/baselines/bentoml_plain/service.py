"""Baselines (b) and (c): a plain BentoML service on the same MLflow model.

What a user writes without mlpipe: load ``models:/fraud/<v>`` with MLflow,
one batchable API taking rows of the model's features and returning
P(fraud). ``BENCH_TUNED`` unset: BentoML's defaults (one worker, access log
on, default batch size and window). ``BENCH_TUNED=1``: the workers, batch
size, batch window, logging and tracing (off: ``serving.tracing``) mlpipe uses (``BENCH_WORKERS``,
``BENCH_MAX_BATCH_SIZE``, ``BENCH_MAX_LATENCY_MS``, set by the runner from
mlpipe's settings). ``BENCH_MODEL_URI`` names the model; ``MLFLOW_TRACKING_URI``
the registry.
"""

from __future__ import annotations

import os
import warnings

import bentoml
import numpy as np

TUNED = os.environ.get("BENCH_TUNED") == "1"
MODEL_URI = os.environ.get("BENCH_MODEL_URI", "models:/fraud/1")

warnings.filterwarnings("ignore", message="X does not have valid feature names")

if TUNED:
    _service = {
        "workers": int(os.environ.get("BENCH_WORKERS", "2")),
        "logging": {"access": {"enabled": False}},
        "tracing": {"excluded_urls": [".*"]},
    }
    _api = {
        "max_batch_size": int(os.environ.get("BENCH_MAX_BATCH_SIZE", "64")),
        "max_latency_ms": int(os.environ.get("BENCH_MAX_LATENCY_MS", "20")),
    }
else:
    _service, _api = {}, {}


@bentoml.service(name="bench-plain", **_service)
class Plain:
    def __init__(self) -> None:
        import mlflow.sklearn

        self.model = mlflow.sklearn.load_model(MODEL_URI)

    @bentoml.api(route="/predict", batchable=True, **_api)
    def predict(self, rows: np.ndarray, /) -> np.ndarray:
        return self.model.predict_proba(rows)[:, 1]
