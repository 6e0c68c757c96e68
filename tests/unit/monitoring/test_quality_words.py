"""The quality section in words: which baseline each metric was judged against, the label's
name, and the same lines on stdout and at the top of the HTML report (issue 28, item 4)."""

from __future__ import annotations

from mlpipe.monitoring._drift_report import quality_lines, verdict_banner
from mlpipe.monitoring._drift_verdict import ArmDrift
from mlpipe.monitoring._quality_section import QualitySection
from mlpipe.monitoring._registered import baseline_words, label_name

MEASURED = {
    "mlpipe.metrics_measured": "auc,log_loss",
    "mlpipe.metrics_on": "dataset hold.csv (the --eval-dataset holdout)",
    "mlpipe.class_recall": '{"0": 0.9}',
}


def _metrics(**baselines: float) -> list[dict[str, object]]:
    return [{"metric": k, "baseline": v} for k, v in baselines.items()]


def test_each_metric_says_whether_register_measured_it_or_it_was_given() -> None:
    words = baseline_words(
        MEASURED, _metrics(auc=0.8, recall=0.6, log_loss=0.4, **{"recall[0]": 0.9})
    )
    assert words == (
        "baseline: auc, log_loss, recall[0] measured at register on dataset hold.csv (the "
        "--eval-dataset holdout); recall given with --metric at register"
    )
    given = baseline_words({}, _metrics(accuracy=0.9, macro_f1=float("nan")))
    assert given == "baseline: accuracy given with --metric at register"  # NaN: not judged
    assert baseline_words(MEASURED, _metrics(auc=float("nan"))) == ""  # the note says so


def test_the_label_name_is_the_versions_else_the_outcome() -> None:
    assert label_name({"mlpipe.label": "species"}) == "species"
    assert label_name({}) == label_name(None) == "outcome"


def test_a_check_without_baseline_says_so_on_stdout_and_in_the_banner() -> None:
    section = QualitySection(
        labelled_rows=500, rows=500, status="no baseline", figures={"auc": 0.51},
        label_lag="outcomes for 500 of 500 request(s)", metrics=[],
        note="no baseline: the version has no registered metrics to judge these labels against",
    )  # fmt: skip
    arm = ArmDrift(
        arm="champion", version="3", verdict="ok", rows=500, rows_tested=500, sampled=False,
        reference_rows=800, drift_share=0.0, quality=section,
    )  # fmt: skip
    lines = quality_lines(arm)
    assert lines == [
        "quality champion: auc=0.51, labelled_rows=500, status=no baseline; outcomes for 500 of "
        "500 request(s)",
        "quality champion: no baseline: the version has no registered metrics to judge these "
        "labels against",
    ]
    banner = verdict_banner("fraud", arm, 0.01)
    assert banner[1:3] == lines
