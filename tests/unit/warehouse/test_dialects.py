"""One dialect per backend, chosen from the URL's scheme; each does the same work its own way."""

from __future__ import annotations

from datetime import datetime

import msgspec
import pandas as pd
import pytest
import sqlalchemy as sa

from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._dialects import DIALECTS, dialect_for, dialect_of
from mlpipe.warehouse._duckdb import DuckDBDialect
from mlpipe.warehouse._postgres import PostgresDialect
from mlpipe.warehouse._segments import _to_arrow
from tests.unit.warehouse.logged import records

NOW = datetime(2026, 12, 6, 12, 0, 0)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("duckdb:///w.duckdb", DuckDBDialect),
        ("duckdb:///:memory:", DuckDBDialect),
        ("postgresql+psycopg://u:p@127.0.0.1/db", PostgresDialect),
        ("postgresql://127.0.0.1/db", PostgresDialect),
    ],
)
def test_the_scheme_picks_the_dialect(url: str, kind: type) -> None:
    assert isinstance(dialect_for(url), kind)
    assert dialect_for(url) is DIALECTS[dialect_for(url).name]  # one object per backend


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "sqlite:///w.db",
            "warehouse sqlite:///w.db: sqlite is not a warehouse backend "
            "(one of: duckdb, postgresql)",
        ),
        (
            "mysql://u:secret@h/db",
            "warehouse mysql://u:***@h/db: mysql is not a warehouse backend "
            "(one of: duckdb, postgresql)",
        ),
    ],
)
def test_another_backend_is_refused_by_name_and_its_password_hidden(url: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        dialect_for(url)
    assert str(caught.value) == message


def test_the_backends_differ_where_the_dialect_says() -> None:
    duck, pg = DIALECTS["duckdb"], DIALECTS["postgresql"]
    assert (duck.opens_read_only, duck.loads_whole, duck.row_id) == (True, True, "rowid")
    assert (pg.opens_read_only, pg.loads_whole, pg.row_id) == (False, False, "ctid")


def test_a_connection_has_its_warehouses_dialect(settings: Settings) -> None:
    with _engine.read(settings) as conn:
        assert dialect_of(conn) is dialect_for(settings.warehouse)


def _table(logged, shift_s: float = 0.0):  # type: ignore[no-untyped-def]
    moved = [msgspec.structs.replace(r, ts=r.ts + shift_s) for r in logged]
    return _to_arrow(moved, ["seg"] * len(moved), NOW)


def _ids(settings: Settings) -> list[str]:
    p = _schema.predictions
    with _engine.read(settings) as conn:
        return sorted(conn.scalars(sa.select(p.c.request_id)))


def test_insert_keeps_the_first_row_of_a_key_and_leaves_loaded_keys_out(
    settings: Settings,
) -> None:
    first = records(3)
    twice = [*first, first[0]]  # r0 twice in one batch
    with _engine.write(settings) as conn:
        dialect = dialect_of(conn)
        assert dialect.insert_predictions(conn, _table(twice)) == 3
    with _engine.write(settings) as conn:
        assert dialect.insert_predictions(conn, _table(records(5))) == 2  # r3, r4 new
    assert _ids(settings) == ["r0", "r1", "r2", "r3", "r4"]


def test_reused_ids_count_keys_another_request_holds(settings: Settings) -> None:
    logged = records(3)
    with _engine.write(settings) as conn:
        dialect_of(conn).insert_predictions(conn, _table(logged))
    replayed = _table(logged[:1])  # the same request again: not a reused id
    reused = _table(logged[1:], shift_s=10.0)  # r1, r2 logged again 10 s later
    with _engine.write(settings) as conn:
        dialect = dialect_of(conn)
        assert dialect.insert_predictions(conn, replayed) == 0
        assert dialect.reused_ids(conn, replayed) == 0
        assert dialect.insert_predictions(conn, reused) == 0
        assert dialect.reused_ids(conn, reused) == 2


def test_outcomes_go_in_with_nulls_kept(settings: Settings) -> None:
    rows = pd.DataFrame(
        {
            "request_id": ["a", "b"],
            "tenant": ["t", "t"],
            "outcome": [1.0, float("nan")],  # NaN: NULL
            "outcome_label": ["1", "setosa"],
            "outcome_ts": pd.to_datetime([NOW, NOW]),
            "source": "labels.csv",
            "loaded_at": NOW,
        }
    )
    with _engine.write(settings) as conn:
        dialect_of(conn).insert_outcomes(conn, rows)
    o = _schema.outcomes
    with _engine.read(settings) as conn:
        got = conn.execute(
            sa.select(o.c.request_id, o.c.outcome, o.c.outcome_label).order_by(o.c.request_id)
        ).all()
    assert [tuple(r) for r in got] == [("a", 1.0, "1"), ("b", None, "setosa")]


def test_run_query_gives_columns_and_one_row_past_the_limit(settings: Settings) -> None:
    sql = "SELECT n FROM (VALUES (1), (2), (3)) AS v(n) ORDER BY n"
    with _engine.read(settings) as conn:
        columns, rows = dialect_of(conn).run_query(conn, sql, 1)
    assert (columns, rows) == (["n"], [(1,), (2,)])


def test_run_query_names_the_databases_error(settings: Settings) -> None:
    with _engine.read(settings) as conn, pytest.raises(InvalidInput) as caught:
        dialect_of(conn).run_query(conn, "SELECT * FROM no_such_table", None)
    assert str(caught.value).startswith("query failed: ")
    assert "no_such_table" in str(caught.value)


def test_fetch_frame_in_time_order_or_sampled(settings: Settings) -> None:
    with _engine.write(settings) as conn:
        dialect_of(conn).insert_predictions(conn, _table(records(6)))
    p = _schema.predictions
    stmt = sa.select(p.c.request_id, p.c.ts)
    with _engine.read(settings) as conn:
        dialect = dialect_of(conn)
        ordered = dialect.fetch_frame(conn, stmt, None, 0)
        sample = dialect.fetch_frame(conn, stmt, 4, 0)
    assert list(ordered.columns) == ["request_id", "ts"]
    assert list(ordered["request_id"]) == ["r5", "r4", "r3", "r2", "r1", "r0"]  # oldest first
    assert len(sample) == 4 and set(sample["request_id"]) <= set(ordered["request_id"])
