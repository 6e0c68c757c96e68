"""``warehouse status``: the backend, rows per table, PostgreSQL's day partitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mlpipe import warehouse
from mlpipe.config import Settings
from tests.unit.warehouse.logged import records, write_segment


def test_status_names_the_backend_and_counts_rows(settings: Settings) -> None:
    write_segment(settings, "s.jsonl", records(4), tail=b"{not json}\n")
    warehouse.sync(settings)
    found = warehouse.status(settings)
    postgres = settings.warehouse.startswith("postgresql")
    assert found.backend == ("postgresql" if postgres else "duckdb")
    assert found.rows == {"predictions": 4, "outcomes": 0, "quarantine": 1}
    assert found.schema_version > 0 and found.prunes == []
    today = datetime.now(UTC).date()
    if postgres:  # the rows are a minute old: today's partition (or yesterday's, at midnight)
        assert found.partition_days and found.partition_days[-1] in (today, today - timedelta(1))
        assert found.default_partition_rows == 0
    else:
        assert (found.partition_days, found.default_partition_rows) == ([], None)
