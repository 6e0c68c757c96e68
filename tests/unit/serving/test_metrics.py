"""The request path's metrics: the gateway's latency series looked up once a (model, arm)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from mlpipe.serving._metrics import serving_metrics


def test_a_models_latency_series_is_the_labelled_one_and_counts_each_observation() -> None:
    registry = CollectorRegistry()
    metrics = serving_metrics(registry)
    series = metrics.request_latency("fraud", "champion")
    assert series is metrics.request_latency("fraud", "champion")
    assert series is metrics.latency.labels("fraud", "champion")
    for seconds in (0.002, 0.02, 0.2):
        metrics.request_latency("fraud", "champion").observe(seconds)
    metrics.request_latency("fraud", "canary").observe(0.002)
    labels = {"model": "fraud", "arm": "champion"}
    count = registry.get_sample_value("mlpipe_request_latency_seconds_count", labels)
    assert count == 3
    under_5ms = registry.get_sample_value(
        "mlpipe_request_latency_seconds_bucket", {**labels, "le": "0.005"}
    )
    assert under_5ms == 1
    canary = {"model": "fraud", "arm": "canary"}
    assert registry.get_sample_value("mlpipe_request_latency_seconds_count", canary) == 1
