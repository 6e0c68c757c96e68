"""PostgreSQL's day partitions of ``predictions`` (DuckDB has one table): created for the days
a load holds, rows the default partition took moved to their day, a day dropped with its keys."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.warehouse import _engine, _partitions
from mlpipe.warehouse._partitions import DayPartition, partition_name
from tests.unit.warehouse.logged import records, write_segment

DAY = 86400.0


def test_a_day_partition_is_named_by_its_day_and_holds_that_day() -> None:
    part = DayPartition(partition_name(date(2026, 1, 2)), date(2026, 1, 2))
    assert part.name == "predictions_p20260102"
    assert (part.start, part.end) == (datetime(2026, 1, 2), datetime(2026, 1, 3))


def test_only_postgresql_partitions_predictions(settings: Settings) -> None:
    with _engine.read(settings) as conn:
        partitioned = _partitions.is_partitioned(conn)
    assert partitioned == (settings.warehouse.startswith("postgresql"))


def _days(settings: Settings) -> list[date]:
    with _engine.read(settings) as conn:
        return [p.day for p in _partitions.day_partitions(conn)]


def _count(settings: Settings, table: str) -> int:
    with _engine.read(settings) as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.mark.postgres
def test_a_load_creates_its_days_and_a_new_day_takes_its_rows_from_the_default(
    postgres_settings: Settings,
) -> None:
    settings = postgres_settings
    now = time.time()
    write_segment(
        settings, "s.jsonl", records(2, "a", start=now) + records(2, "b", start=now - 3 * DAY)
    )
    warehouse.sync(settings)
    today = datetime.fromtimestamp(now, UTC).date()
    earlier = datetime.fromtimestamp(now - 3 * DAY, UTC).date()
    assert set(_days(settings)) >= {today, earlier}
    assert _count(settings, _partitions.DEFAULT_PARTITION) == 0
    with _engine.write(settings) as conn:  # a row for a day without a partition: the default's
        missing = today + timedelta(days=30)
        conn.exec_driver_sql(
            "INSERT INTO predictions SELECT request_id || '-x', arm, "
            f"TIMESTAMP '{missing.isoformat()} 01:00', tenant, model, version, generation, "
            "entity_key, entity, features, score, label, latency_ms, feature_cache_hit, "
            "prediction_cache_hit, features_missing, status, segment, loaded_at, probabilities "
            "FROM predictions LIMIT 1"
        )
    assert _count(settings, _partitions.DEFAULT_PARTITION) == 1
    with _engine.write(settings) as conn:
        assert _partitions.ensure_days(conn, [missing]) == [partition_name(missing)]
        assert _partitions.ensure_days(conn, [missing]) == []  # there already
    assert _count(settings, _partitions.DEFAULT_PARTITION) == 0
    assert _count(settings, partition_name(missing)) == 1


@pytest.mark.postgres
def test_dropping_a_day_removes_its_rows_and_their_keys(postgres_settings: Settings) -> None:
    settings = postgres_settings
    old = time.time() - 10 * DAY
    write_segment(settings, "s.jsonl", records(3, "old", tenant="acme", start=old))
    warehouse.sync(settings)
    day = datetime.fromtimestamp(old, UTC).date()
    part = DayPartition(partition_name(day), day)
    with _engine.writer(settings) as conn:
        dropped = _partitions.drop_day(conn, part, chunk=2)
    assert dropped == {"acme": 3}
    assert day not in _days(settings)
    assert (_count(settings, "predictions"), _count(settings, "prediction_keys")) == (0, 0)
