"""The drift answer as ``--json`` prints it: the fields in their documented order, each
arm's derived lists, the overall verdict by precedence and its exit code."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from mlpipe.monitoring._calibration_statement import CalibrationStatement
from mlpipe.monitoring._drift_verdict import ArmDrift, DriftVerdict, overall
from mlpipe.monitoring._judgement import ColumnDrift
from mlpipe.monitoring._quality_section import QualitySection
from mlpipe.monitoring._screen import SkippedColumn


def _arm(verdict: Any = "ok", **fields: Any) -> ArmDrift:
    return ArmDrift(
        arm="champion", version="1", verdict=verdict, rows=100, rows_tested=100, sampled=False,
        reference_rows=500, **fields,
    )  # fmt: skip


def _drifted(column: str, kind: Any) -> ColumnDrift:
    return ColumnDrift(
        column=column, kind=kind, method="m", score=1.0, threshold=0.1, drifted=True,
        status="drift",
    )  # fmt: skip


def test_an_arm_dict_keeps_the_field_order_then_the_derived_lists() -> None:
    quality = QualitySection(labelled_rows=1, rows=100, label_lag="lag", status="insufficient")
    arm = _arm(
        "drift", columns=[_drifted("amount", "feature"), _drifted("age", "missing")],
        skipped=[SkippedColumn(column="blob", reason="too many categories")], quality=quality,
    )  # fmt: skip
    data = arm.to_dict()
    assert list(data) == [
        "arm", "version", "verdict", "rows", "rows_tested", "sampled", "reference_rows",
        "drift_share", "entities", "per_column_alpha", "columns", "alarms", "skipped", "notes",
        "quality", "html", "json", "drifted_features", "missing_share_drifted",
    ]  # fmt: skip
    assert data["columns"][0]["column"] == "amount" and data["columns"][0]["severity"] is None
    assert data["skipped"] == [{"column": "blob", "reason": "too many categories"}]
    assert data["quality"] == quality.to_dict()
    assert data["drifted_features"] == ["amount"] and data["missing_share_drifted"] == ["age"]
    assert arm.finding().summary["drifted"] == ["amount"]


def test_the_verdict_dict_ends_with_the_exit_code() -> None:
    result = DriftVerdict(
        model="fraud", window_start=datetime(2026, 1, 1), window_end=datetime(2026, 1, 2),
        reference="training reference", drift_share_threshold=0.5, verdict="quality",
        arms=[_arm("quality")], report_dir="reports/fraud/x",
        calibration=CalibrationStatement(false_alarm_rate=0.01),
    )  # fmt: skip
    data = result.to_dict()
    assert list(data)[-3:] == ["report_dir", "calibration", "exit_code"]
    assert data["exit_code"] == result.exit_code == 1
    assert data["calibration"]["false_alarm_rate"] == 0.01
    assert data["arms"][0]["verdict"] == "quality"


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        (["ok", "quality", "drift"], "quality"),
        (["insufficient", "drift"], "drift"),
        (["no_data", "ok", "insufficient"], "ok"),
        (["no_data", "insufficient"], "insufficient"),
        ([], "no_data"),
    ],
)
def test_the_overall_verdict_is_the_most_serious_arm(verdicts: list[Any], expected: str) -> None:
    assert overall([_arm(v) for v in verdicts]) == expected


def test_results_are_frozen() -> None:
    with pytest.raises(AttributeError):
        _arm().verdict = "drift"  # type: ignore[misc]
