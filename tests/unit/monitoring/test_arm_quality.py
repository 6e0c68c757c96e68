"""An arm's quality: none without outcomes; a version the registry cannot tell about is
not judged, and Evidently's figures sit beside the section, its report outside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe.config import load_settings
from mlpipe.errors import NotFound
from mlpipe.monitoring import _arm_quality
from mlpipe.monitoring._arm_window import ArmWindow


def _window(outcome: np.ndarray) -> ArmWindow:
    n = len(outcome)
    rows = pd.DataFrame(
        {
            "score": np.linspace(0, 1, n),
            "label": (np.linspace(0, 1, n) >= 0.5).astype(int),
            "outcome": outcome,
            "ts": pd.date_range("2026-01-01", periods=n, freq="s"),
            "version": "1",
        }
    )
    return ArmWindow(
        rows=rows, features=pd.DataFrame(index=range(n)), entities=None, total=n, sampled=False
    )


def test_no_outcome_no_quality(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert _arm_quality.arm_quality(settings, "m", "1", _window(np.full(50, np.nan))) is None


def test_an_unknown_version_is_not_judged_and_evidently_reports_beside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unknown(*_: Any) -> Any:
        raise NotFound("no such version")

    report = object()
    monkeypatch.setattr(_arm_quality, "registered_metrics", unknown)
    monkeypatch.setattr(
        _arm_quality, "classification_quality", lambda *_: ({"accuracy": 0.5}, report)
    )
    settings = load_settings(home=tmp_path)
    outcome = np.tile([0.0, 1.0], 300)
    judged = _arm_quality.arm_quality(settings, "m", "1", _window(outcome))
    assert judged is not None and judged.report is report
    section = judged.section
    assert section.status == "not judged" and section.labelled_rows == 600
    assert section.evidently == {"accuracy": 0.5} and section.baseline == ""
    assert "_snapshot" not in section.to_dict() and section.to_dict()["evidently"] == {
        "accuracy": 0.5
    }
