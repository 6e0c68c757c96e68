"""Opening the warehouse: created and migrated on first use, reads that cannot write,
a write transaction that commits or rolls back whole."""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.warehouse import _engine, _schema


def _rows(settings: Settings) -> int:
    with warehouse.read(settings) as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(_schema.tenant_retention)
            ).scalar_one()
        )


def test_a_read_creates_a_missing_duckdb_warehouse_at_the_newest_version(
    duckdb_settings: Settings,
) -> None:
    path = Path(duckdb_settings.state_path / "warehouse.duckdb")
    assert not path.exists()
    with warehouse.read(duckdb_settings) as conn:
        assert _schema.current_version(conn) == _schema.HEAD
    assert path.exists()


def test_nothing_a_read_writes_stays(settings: Settings) -> None:
    """DuckDB opens the file read-only (the write fails); PostgreSQL rolls the read back."""
    row = {"tenant": "acme", "days": 7, "updated_at": datetime(2026, 12, 6)}
    with contextlib.suppress(DBAPIError), warehouse.read(settings) as conn:
        conn.execute(_schema.tenant_retention.insert().values(**row))
    assert _rows(settings) == 0


def test_a_write_commits_whole_or_not_at_all(settings: Settings) -> None:
    row = {"tenant": "acme", "days": 7, "updated_at": datetime(2026, 12, 6)}
    with pytest.raises(RuntimeError), _engine.write(settings) as conn:
        conn.execute(_schema.tenant_retention.insert().values(**row))
        raise RuntimeError("fails after the insert")
    assert _rows(settings) == 0
    with _engine.write(settings) as conn:
        conn.execute(_schema.tenant_retention.insert().values(**row))
    assert _rows(settings) == 1


@pytest.mark.parametrize("open_", [warehouse.read, warehouse.write])
def test_a_warehouse_of_another_backend_is_refused(tmp_path: Path, open_) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(home=tmp_path, warehouse_url=f"sqlite:///{tmp_path / 'w.db'}")
    with pytest.raises(InvalidInput) as caught, open_(settings):
        pass
    assert str(caught.value).endswith(
        "sqlite is not a warehouse backend (one of: duckdb, postgresql)"
    )
