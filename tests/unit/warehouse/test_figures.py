"""Live per-arm figures of a model from ``predictions`` (what ``mlpipe status`` shows)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from mlpipe import warehouse
from mlpipe.config import Settings
from tests.unit.warehouse.logged import records, write_segment


def test_arm_figures_per_arm_and_version(settings: Settings) -> None:
    now = time.time()
    write_segment(
        settings, "s.jsonl", records(4, start=now) + records(2, "s", arm="shadow", start=now)
    )
    warehouse.sync(settings)
    since = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    figures = warehouse.arm_figures(settings, "fraud", since)
    assert [(f.arm, f.version, f.requests, f.errors) for f in figures] == [
        ("champion", "1", 4, 0),
        ("shadow", "1", 2, 0),
    ]
    assert figures[0].p50_ms == 3.0 and figures[0].p99_ms == 3.0
    assert warehouse.arm_figures(settings, "churn", since) == []
