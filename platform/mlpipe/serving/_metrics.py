"""Prometheus metrics of the request path, added to BentoML's own on ``/metrics``.

prometheus-client is imported on first use, not at module import: BentoML sets
``PROMETHEUS_MULTIPROC_DIR`` in each worker after the service module is
imported, and a client imported earlier would keep its values in memory where
``/metrics`` never sees them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class ServingMetrics:
    predictions: Any  # Counter{model, version, arm}
    latency: Any  # Histogram{model, arm}, seconds in the gateway
    rejected: Any  # Counter{status}
    feature_cache: Any  # Counter{model, result=hit|miss}
    prediction_cache: Any  # Counter{model, result=hit|miss}
    features_missing: Any  # Counter{model, feature}
    shadow: Any  # Counter{model, version, result=scored|dropped|failed}
    reloads: Any  # Counter{model, result=loaded|refused}
    batch_size: Any  # Histogram, requests per pipeline batch
    predlog_errors: Any  # Counter{policy}, rows the prediction log failed to write
    _latency_of: dict[tuple[str, str], Any] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def request_latency(self, model: str, arm: str) -> Any:
        """``latency``'s series for (``model``, ``arm``), looked up once: ``labels()``
        takes a lock and builds its key on every call, and the gateway observes one a
        request. The models are those served, the arms two, so the entries are few."""
        series = self._latency_of.get((model, arm))
        if series is None:
            series = self._latency_of[model, arm] = self.latency.labels(model, arm)
        return series


# field → (name, help, labels) of each counter
_COUNTERS = {
    "predictions": ("mlpipe_predictions", "Answered predictions", ["model", "version", "arm"]),
    "rejected": ("mlpipe_rejected_requests", "Requests answered with an error", ["status"]),
    "feature_cache": (
        "mlpipe_feature_cache_lookups",
        "Feature-cache lookups",
        ["model", "result"],
    ),
    "prediction_cache": (
        "mlpipe_prediction_cache_lookups",
        "Prediction-cache lookups",
        ["model", "result"],
    ),
    "features_missing": (
        "mlpipe_features_missing",
        "Model inputs filled with a default",
        ["model", "feature"],
    ),
    "shadow": (
        "mlpipe_shadow_predictions",
        "Shadow scoring outcomes",
        ["model", "version", "result"],
    ),
    "reloads": (
        "mlpipe_generation_loads",
        "Deployment generations loaded or refused",
        ["model", "result"],
    ),
    "predlog_errors": (
        "mlpipe_predlog_write_errors",
        "Prediction-log rows whose write failed (policy: fail_closed refused them)",
        ["policy"],
    ),
}

_lock = threading.Lock()
_metrics: ServingMetrics | None = None


def serving_metrics(registry: Any = None) -> ServingMetrics:
    """The process's metrics (created once, in the default registry unless one is given)."""
    global _metrics
    with _lock:
        if _metrics is not None and registry is None:
            return _metrics
        from prometheus_client import REGISTRY, Counter, Histogram

        reg = registry or REGISTRY
        counters = {
            field: Counter(name, text, labels, registry=reg)
            for field, (name, text, labels) in _COUNTERS.items()
        }
        m = ServingMetrics(
            **counters,
            latency=Histogram(
                "mlpipe_request_latency_seconds",
                "Gateway latency of /predict",
                ["model", "arm"],
                buckets=LATENCY_BUCKETS,
                registry=reg,
            ),
            batch_size=Histogram(
                "mlpipe_pipeline_batch_size",
                "Requests per pipeline batch",
                buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                registry=reg,
            ),
        )
        if registry is None:
            _metrics = m
        return m


OTHER_ENDPOINT = "other"


class EndpointLabels:
    """The ``endpoint`` label of a request: the template of the route its path names, or ``other``.

    A label per raw path lets any client, before any key is checked, add series
    without bound: 2,000 GETs to unique unknown paths grew ``/metrics`` from
    162 kB to 9 MB and the worker by 150 MB (issue 23, item 1). With templates
    the series are as many as the routes, whatever the paths and statuses; a
    path parameter (``/v2/models/{name}/infer``) never becomes a label.
    """

    def __init__(self, routes: Iterable[tuple[str, re.Pattern[str]]]) -> None:
        """``routes``: (template, the regex a path matching it matches), first match wins."""
        self._routes = list(routes)
        self._plain = {t for t, _ in self._routes if "{" not in t}

    def __call__(self, path: str) -> str:
        if path in self._plain:
            return path
        for template, regex in self._routes:
            if regex.match(path):
                return template
        return OTHER_ENDPOINT


__all__ = [
    "LATENCY_BUCKETS",
    "OTHER_ENDPOINT",
    "EndpointLabels",
    "ServingMetrics",
    "serving_metrics",
]
