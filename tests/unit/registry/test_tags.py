"""Metrics travel as ``mlpipe.metric.NAME`` tags and come back as the same floats."""

from __future__ import annotations

from mlpipe.registry import VersionInfo, tag_names


def test_metric_tags_round_trip_exactly() -> None:
    metrics = {"auc": 0.9123456789012345, "accuracy_delta": -0.001, "rows": 600}
    tags = tag_names.metric_tags(metrics)
    assert tags == {
        "mlpipe.metric.auc": "0.9123456789012345",
        "mlpipe.metric.accuracy_delta": "-0.001",
        "mlpipe.metric.rows": "600.0",
    }
    assert tag_names.metrics({**tags, tag_names.THRESHOLD: "0.5", "other": "x"}) == metrics


def test_version_info_reads_features_and_metrics_from_its_tags() -> None:
    info = VersionInfo(
        name="fraud",
        version="1",
        aliases=[],
        tags={tag_names.FEATURES: '["amount", "txn_count_7d"]', "mlpipe.metric.auc": "0.75"},
        run_id=None,
        source="models:/m-1",
        created_ms=0,
    )
    assert info.features == ["amount", "txn_count_7d"]
    assert info.metrics == {"auc": 0.75}
