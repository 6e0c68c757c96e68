"""Releasing loaded segments: a closed segment loaded whole goes (or is archived) once kept
long enough; an open one, or one that grew since its load, stays."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.warehouse import _engine
from mlpipe.warehouse._release import release_loaded
from tests.unit.warehouse.logged import records, write_segment


def _keep(settings: Settings, hours: float, archive: Path | None = None) -> Settings:
    predlog = settings.predlog.model_copy(
        update={"keep_loaded_hours": hours, "archive_dir": archive}
    )
    return settings.model_copy(update={"predlog": predlog})


def _release(settings: Settings, later: timedelta = timedelta()) -> tuple[int, int]:
    now = datetime.now(UTC).replace(tzinfo=None) + later
    with _engine.writer(settings) as conn:
        done = release_loaded(conn, settings, now)
    return done.segments, done.bytes


def test_a_loaded_segment_goes_once_kept_long_enough(duckdb_settings: Settings) -> None:
    settings = _keep(duckdb_settings, 2)
    loaded = write_segment(settings, "w1/loaded.jsonl", records(3))
    still_open = write_segment(settings, "w1/open.jsonl.open", records(2, "o"))
    warehouse.sync(settings)
    grew = write_segment(settings, "w1/grew.jsonl", records(1, "g"))  # loaded below, then grows
    warehouse.sync(settings)
    grew.write_bytes(grew.read_bytes() + grew.read_bytes())
    assert _release(settings) == (0, 0)  # kept two hours
    size = loaded.stat().st_size
    assert _release(settings, timedelta(hours=3)) == (1, size)
    assert not loaded.exists() and still_open.exists() and grew.exists()


def test_a_released_segment_is_archived_under_its_own_path(duckdb_settings: Settings) -> None:
    archive = duckdb_settings.home / "archive"
    settings = _keep(duckdb_settings, 0, archive)
    write_segment(settings, "w1/s.jsonl", records(2))
    warehouse.sync(settings)  # a sync releases too
    assert (archive / "w1" / "s.jsonl").exists()
    assert not (settings.predlog_path / "w1" / "s.jsonl").exists()


def test_log_usage_counts_the_segments_not_yet_loaded(duckdb_settings: Settings) -> None:
    settings = _keep(duckdb_settings, 24)
    started_ns = time.time_ns() - 10 * 10**9
    write_segment(settings, "w1/a.jsonl", records(2))
    warehouse.sync(settings)
    write_segment(settings, f"w1/w1-{started_ns}.jsonl.open", records(1, "b"))
    usage = warehouse.log_usage(settings)
    assert (usage.segments, usage.unloaded) == (2, 1)
    assert usage.oldest_unloaded_s is not None and usage.oldest_unloaded_s >= 10
    assert 0 <= usage.free_percent <= 100
    assert warehouse.log_usage(settings, warehouse=False).unloaded == 2
