"""PostgreSQL, the production warehouse: ad-hoc SQL as one prepared statement in a read-only
transaction; rows COPYed in, their day partitions made first."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.warehouse import _engine, _partitions
from mlpipe.warehouse._dialects import dialect_of
from mlpipe.warehouse._segments import _to_arrow
from tests.unit.warehouse.logged import records

pytestmark = pytest.mark.postgres

DAY = 86400.0


def test_one_statement_at_a_time(postgres_settings: Settings) -> None:
    with pytest.raises(InvalidInput) as caught:
        warehouse.query(postgres_settings, "SELECT 1; SELECT 2")
    assert str(caught.value) == "query failed: run one statement at a time"


def test_a_statement_that_writes_fails_in_the_read_only_transaction(
    postgres_settings: Settings,
) -> None:
    sql = "WITH gone AS (DELETE FROM predictions RETURNING 1) SELECT count(*) FROM gone"
    with pytest.raises(InvalidInput) as caught:
        warehouse.query(postgres_settings, sql)
    message = str(caught.value)  # PostgreSQL names the statement (DELETE, or SELECT by version)
    assert message.startswith("query failed: cannot execute ")
    assert message.endswith(" in a read-only transaction")


def test_a_percent_sign_is_text_not_a_parameter(postgres_settings: Settings) -> None:
    assert warehouse.query(postgres_settings, "SELECT '100%' AS p").rows == [("100%",)]


def test_an_insert_makes_the_day_partitions_of_its_rows(postgres_settings: Settings) -> None:
    then = time.time() - 5 * DAY
    table = _to_arrow(records(2, start=then), ["s"] * 2, datetime(2026, 12, 6))
    with _engine.write(postgres_settings) as conn:
        assert dialect_of(conn).insert_predictions(conn, table) == 2
        days = [p.day for p in _partitions.day_partitions(conn)]
    assert datetime.fromtimestamp(then, UTC).date() in days
