"""Two models may score the same request id; a reused id is reported (issue 28, item 2).

Before the fix ``predictions`` was keyed by ``(request_id, tenant, arm)``: a team
that scored one order with a fraud and a churn model lost every row of the second
model at sync, counted as "already loaded" beside true replays. Each test runs on
a DuckDB file and on a real PostgreSQL.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.predlog import ENCODER, PredictionRecord
from tests.conftest import run_cli
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`
from tests.integration.warehouse_past import unpartition_predictions

pytestmark = pytest.mark.integration

START = time.time() - 600


def _record(request_id: str, model: str, second: float, **changes: object) -> PredictionRecord:
    record = PredictionRecord(
        request_id=request_id,
        ts=START + second,
        tenant="acme",
        model=model,
        version="1",
        arm="champion",
        generation=1,
        entity_key="order_id=7",
        entity={"order_id": 7},
        features={"amount": second},
        score=0.5,
        label=1,
        latency_ms=2.0,
    )
    return msgspec.structs.replace(record, **changes)


def _write(path: Path, records: list[PredictionRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


def _orders(model: str, n: int = 3) -> list[PredictionRecord]:
    return [_record(f"order-{i}", model, i) for i in range(n)]


def _rows_by_model(settings: Settings) -> list[tuple[str, int]]:
    sql = "SELECT model, count(*) FROM predictions GROUP BY model ORDER BY model"
    return [tuple(r) for r in warehouse.query(settings, sql).rows]  # type: ignore[misc]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.open"])  # one statement / row by row
def test_two_models_scoring_the_same_request_ids_load_every_row(
    settings: Settings, suffix: str
) -> None:
    _write(settings.predlog_path / "w1" / f"seg{suffix}", _orders("fraud"))
    _write(settings.predlog_path / "w2" / f"seg{suffix}", _orders("churn"))
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.duplicates, result.reused_ids) == (6, 0, 0)
    assert _rows_by_model(settings) == [("churn", 3), ("fraud", 3)]
    # both models' rows in one segment too (the row-by-row path's own key check)
    _write(
        settings.predlog_path / "w3" / f"both{suffix}",
        [_record("x", "fraud", 9), _record("x", "churn", 9)],
    )
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.reused_ids, again.rows_total) == (2, 0, 8)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.open"])
def test_a_reused_request_id_is_counted_not_silently_dropped(
    settings: Settings, suffix: str
) -> None:
    _write(settings.predlog_path / "w1" / f"seg{suffix}", _orders("fraud"))
    assert warehouse.sync(settings).rows_loaded == 3
    # a replay of the same rows, and order-1 used again by the client an hour later
    _write(settings.predlog_path / "w2" / f"replay{suffix}", _orders("fraud"))
    _write(settings.predlog_path / "w3" / f"later{suffix}", [_record("order-1", "fraud", 3600)])
    result = warehouse.sync(settings)
    read = 4 + (3 if suffix == ".jsonl.open" else 0)  # an open segment is read every time
    assert (result.rows_read, result.rows_loaded, result.duplicates) == (read, 0, read)
    assert result.reused_ids == 1  # the replay is quiet, the reused id is not
    kept = warehouse.query(
        settings, "SELECT features FROM predictions WHERE request_id = 'order-1'"
    ).rows
    assert [json.loads(f) for (f,) in kept] == [{"amount": 1}]  # the first request keeps it


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.open"])
def test_a_request_id_reused_on_another_day_is_counted_not_stored_twice(
    settings: Settings, suffix: str
) -> None:
    # On PostgreSQL each day is its own partition of predictions, and its key is per day:
    # the id's first row, three days back, still holds the key (prediction_keys).
    day = 86400
    _write(settings.predlog_path / "w1" / f"seg{suffix}", _orders("fraud"))
    _write(settings.predlog_path / "w2" / "old.jsonl", [_record("old-1", "fraud", -3 * day)])
    assert warehouse.sync(settings).rows_loaded == 3 + 1
    later = [_record("order-1", "fraud", 2 * day), _record("old-1", "fraud", 0)]
    _write(settings.predlog_path / "w3" / f"later{suffix}", later)
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.reused_ids, result.rows_total) == (0, 2, 4)
    kept = warehouse.query(
        settings,
        "SELECT request_id, features FROM predictions WHERE request_id IN ('order-1', 'old-1') "
        "ORDER BY 1",
    ).rows
    assert [(i, json.loads(f)) for i, f in kept] == [
        ("old-1", {"amount": -3 * day}),
        ("order-1", {"amount": 1}),
    ]


@pytest.mark.parametrize("settings", ["duckdb"], indirect=True)
def test_warehouse_sync_says_how_many_rows_reused_an_id(settings: Settings) -> None:
    env = {"MLPIPE_HOME": str(settings.home), "MLPIPE_WAREHOUSE_URL": settings.warehouse}
    _write(settings.predlog_path / "w1" / "seg.jsonl", _orders("fraud"))
    _write(settings.predlog_path / "w2" / "seg.jsonl", [_record("order-1", "fraud", 3600)])
    done = run_cli("warehouse", "sync", env=env)
    assert done.returncode == 0, done.stderr
    assert "4 row(s): 3 new, 0 already loaded;" in done.stderr
    assert (
        "1 row(s) repeated a request id already loaded for the same tenant, model and arm at "
        "another time: kept the first, left these out"
    ) in " ".join(done.stderr.split())
    as_json = run_cli("warehouse", "sync", "--json", env=env)
    assert '"reused_ids": 0' in as_json.stdout  # nothing new: both segments were loaded whole


def _back_to_migration_8(settings: Settings) -> None:
    """Put the warehouse back to what migration 8 left: predictions keyed without the model."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    engine = sa.create_engine(settings.warehouse, poolclass=NullPool)
    with engine.begin() as conn:
        if conn.dialect.name != "duckdb":
            unpartition_predictions(conn)  # migration 11
            conn.exec_driver_sql(
                "ALTER TABLE predictions DROP CONSTRAINT predictions_pkey, "
                "ADD PRIMARY KEY (request_id, tenant, arm)"
            )
        conn.exec_driver_sql("DELETE FROM schema_migrations WHERE version >= 9")
    engine.dispose()


def test_a_warehouse_keyed_without_the_model_is_migrated(settings: Settings) -> None:
    from mlpipe.warehouse import _schema

    _write(settings.predlog_path / "w1" / "seg.jsonl", _orders("fraud"))
    warehouse.sync(settings)
    _back_to_migration_8(settings)
    _write(settings.predlog_path / "w2" / "seg.jsonl", _orders("churn"))
    result = warehouse.sync(settings)  # migration 9 runs first
    assert (result.rows_loaded, result.rows_total, result.reused_ids) == (3, 6, 0)
    assert _rows_by_model(settings) == [("churn", 3), ("fraud", 3)]
    versions = warehouse.query(settings, "SELECT max(version) FROM schema_migrations").rows
    assert versions == [(_schema.HEAD,)]
    if not settings.warehouse.startswith("duckdb"):
        keys = warehouse.query(
            settings,
            "SELECT tc.table_name, string_agg(k.column_name, ',' ORDER BY k.ordinal_position) "
            "FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage"
            " k USING (constraint_schema, constraint_name) WHERE tc.constraint_type = "
            "'PRIMARY KEY' AND tc.table_name IN ('predictions', 'prediction_keys') "
            "GROUP BY 1 ORDER BY 1",
        ).rows
        assert keys == [
            ("prediction_keys", "request_id,tenant,model,arm"),  # migration 11: across days
            ("predictions", "request_id,tenant,model,arm,ts"),  # per day partition
        ]
