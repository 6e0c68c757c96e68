"""A quality section's JSON keeps the keys and their order the documents have always had,
per path: too few labels, nothing registered, judged; binary figures after the judgement,
the other tasks' before it."""

from __future__ import annotations

from mlpipe.monitoring._label_metrics import MetricComparison
from mlpipe.monitoring._quality_section import QualitySection

AUC = MetricComparison("auc", 0.8, 0.7, -0.1, -0.12, 0.02, True, 300)


def test_an_insufficient_binary_section_names_no_task_and_no_figures() -> None:
    section = QualitySection(
        labelled_rows=3, rows=50, label_lag="lag", status="insufficient", note="3 labelled"
    )
    assert list(section.to_dict()) == [
        "labelled_rows", "rows", "alarms", "label_lag", "status", "note",
    ]  # fmt: skip
    assert section.headline() == [("labelled_rows", 3), ("status", "insufficient")]


def test_a_judged_binary_section_puts_the_note_before_the_status_and_figures_last() -> None:
    section = QualitySection(
        labelled_rows=500, rows=600, label_lag="lag", status="quality", alarms=["auc"],
        note="no baseline for recall: not judged", figures={"auc": 0.7, "recall": None},
        class_recall={"0": 0.9}, metrics=[AUC], baseline_note="widened",
        evidently_asked=True, evidently=None, baseline="baseline: auc given",
    )  # fmt: skip
    data = section.to_dict()
    assert list(data) == [
        "labelled_rows", "rows", "alarms", "label_lag", "class_recall", "metrics", "note",
        "status", "baseline_note", "auc", "recall", "evidently", "baseline",
    ]  # fmt: skip
    assert data["metrics"] == [AUC.__dict__] and data["evidently"] is None
    assert section.headline() == [
        ("auc", 0.7), ("recall", None), ("labelled_rows", 500), ("status", "quality"),
    ]  # fmt: skip
    assert section.notes() == [
        "no baseline for recall: not judged", "baseline: auc given", "widened",
    ]  # fmt: skip


def test_a_multiclass_section_names_its_task_and_gives_figures_before_the_judgement() -> None:
    section = QualitySection(
        task="multiclass", labelled_rows=200, rows=200, label_lag="lag", status="ok",
        unusable_labels=4, labels_note="4 outcome label(s) name no class",
        figures={"accuracy": 0.9}, metrics=[],
    )  # fmt: skip
    assert list(section.to_dict()) == [
        "labelled_rows", "rows", "alarms", "task", "label_lag", "unusable_labels", "labels_note",
        "accuracy", "metrics", "status",
    ]  # fmt: skip
    assert section.notes() == ["4 outcome label(s) name no class"]


def test_an_unjudged_regression_section_keeps_its_figures_then_status_and_note() -> None:
    section = QualitySection(
        task="regression", labelled_rows=200, rows=200, label_lag="lag", status="not judged",
        note="no registered metrics", figures={"mae": 1.5, "rmse": 2.0, "bias": None},
    )  # fmt: skip
    assert list(section.to_dict()) == [
        "labelled_rows", "rows", "alarms", "task", "label_lag", "mae", "rmse", "bias", "status",
        "note",
    ]  # fmt: skip
    assert "evidently" not in section.to_dict()  # Evidently was not asked
    assert [n for n, _ in section.headline()] == ["mae", "rmse", "bias", "labelled_rows", "status"]
