"""Reads: one read-only statement of ad-hoc SQL, and windows of a model's predictions."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from tests.unit.warehouse.logged import records, write_segment

WRITING = (
    "query failed: the warehouse is read-only here; run one SELECT, WITH, VALUES, TABLE, "
    "EXPLAIN, SHOW, DESCRIBE or SUMMARIZE statement"
)


def test_empty_sql_is_refused(duckdb_settings: Settings) -> None:
    with pytest.raises(InvalidInput) as caught:
        warehouse.query(duckdb_settings, "  \n")
    assert str(caught.value) == "empty SQL"


@pytest.mark.parametrize(
    "sql", ["DELETE FROM predictions", "INSERT INTO t VALUES (1)", "-- a comment\nDROP TABLE t"]
)
def test_a_writing_statement_is_refused_before_the_warehouse_is_opened(
    duckdb_settings: Settings, sql: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        warehouse.query(duckdb_settings, sql)
    assert str(caught.value) == WRITING
    assert not duckdb_settings.state_path.exists()  # never opened, so never created


def test_a_query_says_when_it_was_cut_at_the_limit(settings: Settings) -> None:
    sql = "/* three */ SELECT n FROM (VALUES (1), (2), (3)) AS v(n) ORDER BY n"
    assert warehouse.query(settings, sql, limit=2) == warehouse.QueryResult(
        ["n"], [(1,), (2,)], True
    )
    assert warehouse.query(settings, sql, limit=3).truncated is False
    assert warehouse.query(settings, sql, limit=None).rows == [(1,), (2,), (3,)]


def test_a_failing_query_is_an_input_error_naming_the_cause(settings: Settings) -> None:
    with pytest.raises(InvalidInput) as caught:
        warehouse.query(settings, "SELECT * FROM no_such_table")
    assert str(caught.value).startswith("query failed: ")
    assert "no_such_table" in str(caught.value)


def _window(settings: Settings, **kwargs: Any) -> warehouse.PredictionWindow:
    end = datetime.now(UTC).replace(tzinfo=None) + timedelta(minutes=1)
    return warehouse.prediction_window(settings, "fraud", end - timedelta(hours=1), end, **kwargs)


def test_a_window_holds_the_models_rows_and_their_features(settings: Settings) -> None:
    start = time.time() - 120
    logged = records(5, start=start) + records(2, "s", arm="shadow", start=start)
    write_segment(settings, "s.jsonl", logged + records(3, "c", model="churn", start=start))
    warehouse.sync(settings)
    window = _window(settings)
    assert (window.total, window.sampled) == (7, False)
    assert window.rows["ts"].is_monotonic_increasing
    assert list(window.features.columns) == ["amount"]
    assert window.rows["outcome"].isna().all() and window.rows["outcome_label"].isna().all()
    assert window.entities is None
    shadow = _window(settings, arm="shadow", with_entities=True)
    assert sorted(shadow.rows["request_id"]) == ["s0", "s1"]
    assert shadow.entities is not None
    assert list(shadow.entities.columns) == ["entity_key", "customer_id"]
    assert warehouse.models_in_warehouse(settings) == ["churn", "fraud"]


def test_a_window_over_the_limit_is_sampled_in_sql(settings: Settings) -> None:
    write_segment(settings, "s.jsonl", records(20))
    warehouse.sync(settings)
    window = _window(settings, sample_rows=5)
    assert (window.total, window.sampled, len(window.rows)) == (20, True, 5)
    assert len(window.features) == 5
