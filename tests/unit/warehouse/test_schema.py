"""The warehouse's own migrations: a new warehouse reaches the newest version once; each
backend gets the tables its loader expects."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from mlpipe.config import Settings
from mlpipe.warehouse import _engine, _schema


def test_a_new_warehouse_is_migrated_once_to_the_newest_version(
    duckdb_settings: Settings,
) -> None:
    with _engine.write(duckdb_settings) as conn:
        assert _schema.current_version(conn) == _schema.HEAD
        versions = conn.scalars(sa.select(_schema.schema_migrations.c.version)).all()
        assert sorted(versions) == [v for v, _, _ in _schema.MIGRATIONS]
        assert _schema.migrate(conn) == []  # nothing left to apply


def test_an_empty_database_is_at_version_0(tmp_path: Path) -> None:
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    with engine.connect() as conn:
        assert _schema.current_version(conn) == 0
    engine.dispose()


def test_every_backend_ends_at_the_newest_version(settings: Settings) -> None:
    with _engine.read(settings) as conn:
        assert _schema.current_version(conn) == _schema.HEAD


def test_duckdb_predictions_keep_no_key_index_and_store_features_uncompressed(
    duckdb_settings: Settings,
) -> None:
    with _engine.write(duckdb_settings) as conn:
        keys = conn.exec_driver_sql(
            "SELECT count(*) FROM duckdb_constraints() "
            "WHERE table_name = 'predictions' AND constraint_type = 'PRIMARY KEY'"
        ).scalar_one()
        ddl = conn.exec_driver_sql(
            "SELECT sql FROM duckdb_tables() WHERE table_name = 'predictions'"
        ).scalar_one()
    assert keys == 0
    assert "USING COMPRESSION UNCOMPRESSED" in ddl.upper()


def test_postgresql_predictions_are_keyed_in_their_ddl() -> None:
    ddl = str(CreateTable(_schema.predictions).compile(dialect=postgresql.dialect()))
    assert "PRIMARY KEY (request_id, tenant, model, arm)" in ddl
    assert "COMPRESSION" not in ddl  # DuckDB's storage option only


@pytest.mark.postgres
def test_postgresql_keeps_the_key_in_prediction_keys_and_ts_in_the_partitions_key(
    postgres_settings: Settings,
) -> None:
    with _engine.read(postgres_settings) as conn:
        _, own = _schema._primary_key(conn, "predictions")
        _, keys = _schema._primary_key(conn, "prediction_keys")
    assert own == [*_schema.PREDICTION_KEY, "ts"]
    assert keys == list(_schema.PREDICTION_KEY)
