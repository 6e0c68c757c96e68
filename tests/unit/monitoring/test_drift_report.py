"""An arm's result in words (the same on stdout and atop its HTML) and its report files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlpipe.monitoring import _drift_report
from mlpipe.monitoring._drift_report import arm_title, save_reports, save_snapshot, verdict_banner
from mlpipe.monitoring._drift_verdict import ArmDrift
from mlpipe.monitoring._judgement import ColumnDrift

MISSING = ColumnDrift(
    column="amount", kind="missing", method="m", score=9.0, threshold=3.0, drifted=True,
    status="drift", severity="high", detail="missing 50.0% vs reference 5.0%",
)  # fmt: skip
ARM = ArmDrift(
    arm="canary", version="4", verdict="drift", rows=900, rows_tested=800, sampled=True,
    reference_rows=5000, entities=120, columns=[MISSING], alarms=["amount: high shift"],
)  # fmt: skip


def test_the_title_says_rows_tested_entities_and_reference() -> None:
    assert arm_title("fraud", ARM) == (
        "fraud canary v4: drift — 800 of 900 request(s) from 120 entities, reference 5000 row(s)"
    )


def test_the_banner_gives_title_alarms_missing_shares_then_thresholds() -> None:
    banner = verdict_banner("fraud", ARM, 0.01)
    assert banner[:3] == [
        arm_title("fraud", ARM),
        "alarm canary: amount: high shift",
        "missing share amount: drift; missing 50.0% vs reference 5.0%",
    ]
    assert banner[3].startswith("thresholds: calibrated per column for 1% false alarms")
    assert banner[4].startswith("mlpipe's verdict above decides.")


def test_a_snapshot_is_saved_as_html_and_json_beside_each_other(
    tmp_path: Path, monkeypatch: Any
) -> None:
    written: list[tuple[Path, list[str]]] = []
    monkeypatch.setattr(
        _drift_report,
        "write_evidently_html",
        lambda s, path, banner: written.append((path, banner)),
    )

    class Snapshot:
        def save_json(self, path: str) -> None:
            Path(path).write_text("{}")

    html, js = save_snapshot(Snapshot(), tmp_path, "canary-v4", ["line"])
    assert (html, js) == (str(tmp_path / "canary-v4.html"), str(tmp_path / "canary-v4.json"))
    assert written == [(tmp_path / "canary-v4.html", ["line"])]
    assert Path(js).read_text() == "{}"


def test_an_arms_reports_are_its_drift_page_and_its_quality_page(
    tmp_path: Path, monkeypatch: Any
) -> None:
    written: list[str] = []
    monkeypatch.setattr(
        _drift_report, "write_evidently_html", lambda s, path, banner: written.append(path.name)
    )

    class Snapshot:
        def save_json(self, path: str) -> None:
            written.append(Path(path).name)

    saved = save_reports(ARM, Snapshot(), Snapshot(), tmp_path / "canary-v4", ["line"])
    assert written == [
        "canary-v4.html",
        "canary-v4.json",
        "canary-v4-quality.html",
        "canary-v4-quality.json",
    ]
    assert saved.html == str(tmp_path / "canary-v4.html") and ARM.html is None
    assert save_reports(ARM, None, None, tmp_path / "x", []) == ARM  # nothing to write
