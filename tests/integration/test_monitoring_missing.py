"""Missing values through the warehouse and ``monitor drift`` (issue 28, item 1): logged nulls
sync and test without a crash, and each column's missing share is a drift signal of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import monitoring
from tests.integration.test_monitoring_drift import _cli, _frame, _traffic

pytestmark = pytest.mark.integration


def _with_gaps(n: int, seed: int, share: float) -> pd.DataFrame:
    """``_frame`` with column ``a`` missing on ``share`` of its rows (``b`` on 5 % of them)."""
    frame = _frame(n, seed)
    rng = np.random.default_rng(seed + 1000)
    frame.loc[rng.random(n) < share, "a"] = np.nan
    frame.loc[rng.random(n) < 0.05, "b"] = np.nan
    return frame


@pytest.fixture(autouse=True)
def _small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLPIPE_MONITOR__DRIFT_MIN_ROWS", "50")


@pytest.mark.parametrize("rows", [50, 2000])
def test_a_window_with_the_references_missing_share_has_no_missing_alarm(
    settings: Any, rows: int
) -> None:
    from mlpipe.config import load_settings

    settings = load_settings(home=settings.home)
    _traffic(settings, rows, 3, frame=_with_gaps(rows, 3, 0.05))
    verdict = monitoring.drift(settings, "fraud", "24h", reference_frame=_with_gaps(4000, 1, 0.05))
    (arm,) = verdict.arms
    missing = {c.column: c for c in arm.columns if c.kind == "missing"}
    assert set(missing) == {"a", "b"} and arm.missing_share_drifted == []
    assert all(c.status == "ok" for c in missing.values()), missing
    assert not any("missing share" in a for a in arm.alarms)


@pytest.mark.parametrize("rows", [50, 2000])
def test_a_column_going_from_5_to_60_percent_missing_alarms_by_name(
    settings: Any, capsys: pytest.CaptureFixture[str], rows: int
) -> None:
    from mlpipe.config import load_settings

    settings = load_settings(home=settings.home)
    reference = settings.home / "reference.parquet"
    _with_gaps(4000, 1, 0.05).to_parquet(reference)
    _traffic(settings, rows, 4, frame=_with_gaps(rows, 4, 0.60))
    verdict = monitoring.drift(settings, "fraud", "24h", reference_frame=pd.read_parquet(reference))
    (arm,) = verdict.arms
    assert arm.missing_share_drifted == ["a"] and verdict.verdict == "drift"
    (alarm,) = [a for a in arm.alarms if "missing share" in a]
    assert alarm.startswith("a: ") and "vs reference" in alarm
    data = verdict.to_dict()["arms"][0]
    assert data["missing_share_drifted"] == ["a"]
    page = Path(arm.html or "").read_text() if arm.html else ""
    assert "missing share a: drift" in page


def test_the_cli_table_and_json_name_the_missing_share(
    settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _with_gaps(1000, 5, 0.05)
    records = _traffic(settings, 1000, 5, frame=old, name="old.jsonl")
    from mlpipe.predlog import ENCODER, PredictionRecord

    aged = [
        PredictionRecord(
            **{
                **{f: getattr(r, f) for f in r.__struct_fields__},
                "ts": r.ts - 2 * 86400,
                "request_id": "old-" + r.request_id,
            }
        )
        for r in records
    ]
    (settings.predlog_path / "old.jsonl").write_bytes(
        b"".join(ENCODER.encode(r) + b"\n" for r in aged)
    )
    _traffic(settings, 500, 6, frame=_with_gaps(500, 6, 0.60))
    args = ["monitor", "drift", "fraud", "--window", "24h", "--reference", "window:3d"]
    code, out, err = _cli([*args, "--json"], capsys)
    assert code == 1, err
    arm = json.loads(out)["arms"][0]
    assert arm["missing_share_drifted"] == ["a"]
    rows = {(c["column"], c["kind"]): c for c in arm["columns"]}
    assert rows[("a", "missing")]["status"] == "drift" and rows[("b", "missing")]["status"] == "ok"
    code, out, err = _cli(args, capsys)
    assert code == 1 and "│ missing" in out  # the table's kind column (the method may wrap)
    assert "alarm champion: a: " in out and "shift in missing share" in out
