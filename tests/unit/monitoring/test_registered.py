"""What a quality section says of the registered version it judges: the label's name and the
baseline in words (the common sentences are in test_quality_words.py; these are the edges)."""

from __future__ import annotations

import pytest

from mlpipe.monitoring._registered import OUTCOME, baseline_words, label_name
from mlpipe.registry import tag_names


def _metrics(**baselines: object) -> list[dict[str, object]]:
    return [{"metric": k, "baseline": v} for k, v in baselines.items()]


@pytest.mark.parametrize("label", ["", "   "])
def test_a_blank_label_tag_is_no_label(label: str) -> None:
    assert label_name({tag_names.LABEL: label}) == OUTCOME == "outcome"
    assert label_name({tag_names.LABEL: " is_fraud "}) == "is_fraud"


def test_without_metrics_on_the_words_say_its_registration_data() -> None:
    tags = {tag_names.METRICS_MEASURED: "auc"}
    assert baseline_words(tags, _metrics(auc=0.9)) == (
        "baseline: auc measured at register on its registration data"
    )


def test_class_recall_counts_as_measured_only_where_register_recorded_it() -> None:
    on = {tag_names.METRICS_ON: "dataset train.csv (the registration dataset)"}
    measured = {**on, tag_names.CLASS_RECALL: '{"fraud": 0.8}'}
    metrics = _metrics(**{"recall[fraud]": 0.8})
    assert baseline_words(measured, metrics) == (
        "baseline: recall[fraud] measured at register on dataset train.csv (the registration "
        "dataset)"
    )
    assert baseline_words(on, metrics) == (
        "baseline: recall[fraud] given with --metric at register"
    )


@pytest.mark.parametrize("baseline", [None, "0.9", float("inf"), float("-inf"), float("nan")])
def test_a_metric_without_a_finite_baseline_is_not_named(baseline: object) -> None:
    tags = {tag_names.METRICS_MEASURED: "auc,recall"}
    words = baseline_words(tags, _metrics(auc=baseline, recall=0.7))
    assert words == "baseline: recall measured at register on its registration data"


def test_the_measured_list_ignores_empty_names_and_keeps_the_section_order() -> None:
    tags = {tag_names.METRICS_MEASURED: ",log_loss,,auc,"}
    words = baseline_words(tags, _metrics(log_loss=0.3, precision=0.5, auc=0.9, bias=0))
    assert words == (
        "baseline: log_loss, auc measured at register on its registration data; "
        "precision, bias given with --metric at register"
    )
    assert baseline_words(None, []) == ""
