"""The embedded warehouse: a DuckDB file, through DuckDB's own API where it is faster.

One process writes the file, or several read it (read-only, file-system access
off). ``predictions`` has no key index (migration 4): the loader keeps the key
with an anti-join, and DuckDB reads log files and Kafka batches in one INSERT
(``loads_whole``; ``_sync._load_whole``, ``_kafka._load_whole_duckdb``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from mlpipe.errors import InvalidInput
from mlpipe.warehouse._segments import COLUMNS
from mlpipe.warehouse._sql import KEY, KNOWN, REUSED, first_line

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa
    from sqlalchemy import Connection, Engine


def duckdb_connection(conn: Connection) -> duckdb.DuckDBPyConnection:
    """The DuckDB connection under ``conn``, for DuckDB's own API (``register``, ``df()``)."""
    raw: duckdb.DuckDBPyConnection | None = conn.connection.driver_connection
    assert raw is not None, "the connection is closed"
    return raw


class DuckDBDialect:
    """:class:`~mlpipe.warehouse._dialects.Dialect` for ``duckdb:///PATH``."""

    name = "duckdb"
    opens_read_only = True
    loads_whole = True
    row_id = "rowid"

    def engine(self, url: str, read_only: bool) -> Engine:
        """An engine on the file (its folder created); read-only ones cannot reach the file
        system, so ad-hoc SQL reads the warehouse only."""
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        connect_args: dict[str, object] = {}
        if read_only:
            connect_args = {"read_only": True, "config": {"enable_external_access": False}}
        return sa.create_engine(url, poolclass=NullPool, connect_args=connect_args)

    def exists(self, url: str) -> bool:
        database = make_url(url).database
        if not database or database == ":memory:":
            return False
        return Path(database).exists()

    def insert_predictions(self, conn: Connection, table: pa.Table) -> int:
        """The rows of ``table`` whose key the table lacks (the first of a repeated key), in
        one set-based statement; returns how many went in."""
        raw = duckdb_connection(conn)
        raw.register("_mlpipe_incoming", table)
        try:
            cols = ", ".join(COLUMNS)
            # A batch almost never repeats a key: count first, pay for DISTINCT ON only if it does.
            unique = raw.execute(
                f"SELECT count(*) = count(DISTINCT {KEY}) FROM _mlpipe_incoming"
            ).fetchone()
            source = (
                "_mlpipe_incoming"
                if unique and unique[0]
                else f"(SELECT DISTINCT ON {KEY} * FROM _mlpipe_incoming)"
            )
            inserted = raw.execute(
                f"""
                INSERT INTO predictions ({cols})
                SELECT {cols} FROM {source} AS i
                WHERE NOT EXISTS ({KNOWN})
                """
            ).fetchall()  # all: a result left open refuses the next register() on this connection
        finally:
            raw.unregister("_mlpipe_incoming")
        return int(inserted[0][0]) if inserted else 0

    def reused_ids(self, conn: Connection, table: pa.Table) -> int:
        raw = duckdb_connection(conn)
        raw.register("_mlpipe_reused", table)
        try:
            found = raw.execute(REUSED.format(source="_mlpipe_reused")).fetchall()
        finally:
            raw.unregister("_mlpipe_reused")
        return int(found[0][0])

    def insert_outcomes(self, conn: Connection, rows: pd.DataFrame) -> None:
        raw = duckdb_connection(conn)
        raw.register("_mlpipe_outcomes", rows)
        try:
            cols = ", ".join(rows.columns)
            raw.execute(f"INSERT INTO outcomes ({cols}) SELECT {cols} FROM _mlpipe_outcomes")
        finally:
            raw.unregister("_mlpipe_outcomes")

    def run_query(
        self, conn: Connection, sql: str, limit: int | None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        try:
            result = conn.exec_driver_sql(sql)
            if not result.returns_rows:
                return [], []
            columns = list(result.keys())
            rows = result.fetchmany(limit + 1) if limit is not None else result.fetchall()
        except DBAPIError as exc:
            raise InvalidInput(f"query failed: {first_line(exc.orig)}") from exc
        return columns, [tuple(r) for r in rows]

    def fetch_frame(
        self, conn: Connection, stmt: sa.Select[Any], sample: int | None, seed: int
    ) -> pd.DataFrame:
        # DuckDB hands the columns over as a DataFrame directly: no Python row per result.
        inner = stmt.compile(conn, compile_kwargs={"literal_binds": True})
        sql = (
            f"SELECT * FROM ({inner}) AS w "
            f"USING SAMPLE reservoir({int(sample)} ROWS) REPEATABLE ({int(seed)})"
            if sample is not None
            else f"SELECT * FROM ({inner}) AS w ORDER BY ts"
        )
        frame = duckdb_connection(conn).execute(sql).df()
        frame.columns = [c.name for c in stmt.selected_columns]
        return frame
