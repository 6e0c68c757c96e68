"""The ``reports`` index: verdicts recorded, listed newest first, filtered."""

from __future__ import annotations

from datetime import datetime, timedelta

from mlpipe import warehouse
from mlpipe.config import Settings

T0 = datetime(2026, 12, 6, 12, 0, 0)


def _entry(n: int, kind: str = "drift", version: str | None = "1") -> warehouse.ReportEntry:
    return warehouse.ReportEntry(
        id=f"rep-{n}",
        kind=kind,
        model="fraud",
        arm="champion",
        version=version,
        window_start=T0 - timedelta(hours=1),
        window_end=T0,
        created_at=T0 + timedelta(minutes=n),
        verdict="ok",
        path=f"reports/{n}.json",
        summary={"psi": 0.1, "at": T0},
    )


def test_reports_are_listed_newest_first_and_filtered(settings: Settings) -> None:
    entries = [_entry(1), _entry(2, "canary", "2"), _entry(3)]
    warehouse.record_reports(settings, entries)
    assert [e.id for e in warehouse.list_reports(settings)] == ["rep-3", "rep-2", "rep-1"]
    assert [e.id for e in warehouse.list_reports(settings, kind="drift")] == ["rep-3", "rep-1"]
    assert [e.id for e in warehouse.list_reports(settings, version="2")] == ["rep-2"]
    assert [e.id for e in warehouse.list_reports(settings, limit=1)] == ["rep-3"]
    assert warehouse.list_reports(settings, model="churn") == []
    [first] = warehouse.list_reports(settings, kind="drift", limit=1)
    assert first.summary == {"psi": 0.1, "at": "2026-12-06 12:00:00"}  # JSON: times as text
    assert first.window_end == T0
