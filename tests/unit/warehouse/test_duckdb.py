"""DuckDB, the embedded warehouse: reads open the file read-only and cannot reach the file
system; a missing file is created in its folder on first use."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.exc import DBAPIError

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.warehouse._duckdb import DuckDBDialect


def test_a_file_exists_only_once_written(tmp_path: Path) -> None:
    dialect = DuckDBDialect()
    path = tmp_path / "deep" / "w.duckdb"
    assert not dialect.exists(f"duckdb:///{path}")
    assert not dialect.exists("duckdb:///:memory:")
    engine = dialect.engine(f"duckdb:///{path}", read_only=False)
    assert path.parent.is_dir()  # made for the file
    with engine.connect():
        pass
    engine.dispose()
    assert dialect.exists(f"duckdb:///{path}")


def test_a_read_opens_the_file_read_only(duckdb_settings: Settings) -> None:
    with warehouse.read(duckdb_settings) as conn, pytest.raises(DBAPIError, match="read-only"):
        conn.exec_driver_sql("DELETE FROM predictions")


def test_ad_hoc_sql_cannot_read_the_file_system(duckdb_settings: Settings) -> None:
    secret = duckdb_settings.home / "secret.csv"
    secret.write_text("a\n1\n")
    with pytest.raises(InvalidInput) as caught:
        warehouse.query(duckdb_settings, f"SELECT * FROM read_csv('{secret}')")
    assert str(caught.value).startswith("query failed: ")
