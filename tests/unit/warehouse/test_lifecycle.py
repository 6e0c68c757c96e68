"""What a sync does after loading, on its write connection: release the segments loaded long
enough ago, prune the rows past retention, and say so in the sync's result (each backend)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.warehouse import SyncResult, _engine, _schema
from mlpipe.warehouse._lifecycle import after_sync
from tests.unit.warehouse.logged import records, write_segment


def _with(settings: Settings, keep_hours: float, retention_days: int | None) -> Settings:
    predlog = settings.predlog.model_copy(update={"keep_loaded_hours": keep_hours})
    return settings.model_copy(
        update={"predlog": predlog, "warehouse_retention_days": retention_days}
    )


def _loaded(settings: Settings) -> tuple[Settings, int]:
    """Three rows a minute old loaded from one closed segment, kept (a day, no retention)."""
    kept = _with(settings, 24, None)
    segment = write_segment(kept, "w1/s.jsonl", records(3))
    assert warehouse.sync(kept).rows_loaded == 3
    return kept, segment.stat().st_size


def _after(settings: Settings, later: timedelta) -> SyncResult:
    result = SyncResult()
    now = datetime.now(UTC).replace(tzinfo=None) + later
    with _engine.writer(settings) as conn:
        after_sync(conn, settings, now, result)
    return result


def _rows(settings: Settings) -> int:
    with _engine.read(settings) as conn:
        count = sa.select(sa.func.count()).select_from(_schema.predictions)
        return int(conn.execute(count).scalar_one())


def test_segments_kept_long_enough_go_and_rows_past_retention_are_pruned(
    settings: Settings,
) -> None:
    kept, size = _loaded(settings)
    result = _after(_with(kept, 1, 1), timedelta(days=2))
    assert (result.segments_released, result.bytes_released, result.rows_pruned) == (1, size, 3)
    assert not (kept.predlog_path / "w1" / "s.jsonl").exists()
    assert _rows(kept) == 0


def test_nothing_old_enough_is_nothing_done(settings: Settings) -> None:
    kept, _ = _loaded(settings)
    result = _after(_with(kept, 1, 1), timedelta(minutes=30))
    assert (result.segments_released, result.bytes_released, result.rows_pruned) == (0, 0, 0)
    assert (kept.predlog_path / "w1" / "s.jsonl").exists()
    assert _rows(kept) == 3


def test_without_retention_rows_stay_though_segments_go(settings: Settings) -> None:
    kept, size = _loaded(settings)
    result = _after(_with(kept, 1, None), timedelta(days=400))
    assert (result.segments_released, result.bytes_released, result.rows_pruned) == (1, size, 0)
    assert _rows(kept) == 3
