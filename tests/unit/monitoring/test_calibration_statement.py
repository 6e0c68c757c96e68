"""How a drift report's thresholds were set: the JSON's fields and the words stdout prints."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from mlpipe.monitoring._calibration_statement import CalibrationStatement, thresholds_text


def test_the_statement_holds_its_fields_in_the_documents_order() -> None:
    data = asdict(CalibrationStatement(false_alarm_rate=0.05))
    assert list(data) == [
        "false_alarm_rate", "correction", "methods", "resamples", "min_effect",
        "min_effective_size", "null",
    ]  # fmt: skip
    assert data["methods"] == {"numerical": "wasserstein", "categorical": "jensenshannon"}
    assert data["false_alarm_rate"] == 0.05


def test_the_thresholds_line_reads_the_statement() -> None:
    text = thresholds_text(CalibrationStatement(false_alarm_rate=0.01))
    assert text == (
        "thresholds: calibrated per column for 1% false alarms per report on clean windows of "
        "the same effective size (Sidak over the tested columns of an arm; 400 windows "
        "resampled from the reference); alarm when significant and effect >= 0.1; fewer than "
        "30 distinct entities: insufficient"
    )


def test_the_statement_is_frozen() -> None:
    statement = CalibrationStatement(false_alarm_rate=0.01)
    with pytest.raises(AttributeError):
        statement.false_alarm_rate = 0.5  # type: ignore[misc]
