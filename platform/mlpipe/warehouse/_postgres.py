"""The production warehouse: PostgreSQL through psycopg 3, rows moved in by ``COPY``.

Several loaders may write at once. ``predictions`` is partitioned by day
(migration 11, :mod:`._partitions`), so its own key holds ``ts``; the key the
loader keeps is claimed in ``prediction_keys`` first. Reads run in a
transaction that is rolled back; ad-hoc SQL in a read-only one, as a prepared
statement.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from mlpipe.errors import InvalidInput
from mlpipe.warehouse import _partitions, _schema
from mlpipe.warehouse._segments import COLUMNS
from mlpipe.warehouse._sql import KEY, KEY_COLUMNS, REUSED_US, first_line

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from sqlalchemy import Connection, Engine


# Each row's key claimed in ``prediction_keys`` where it lacks it: of a key the batch holds
# twice, the first row's (a temporary table is scanned in the order it was written, and
# ``ORDER BY _n`` says so).
_CLAIM = f"""
INSERT INTO prediction_keys ({KEY_COLUMNS}, ts)
SELECT {KEY_COLUMNS}, ts FROM _mlpipe_incoming ORDER BY _n ON CONFLICT DO NOTHING
"""
_ROWS = f"""
INSERT INTO predictions ({", ".join(COLUMNS)}) SELECT {", ".join(COLUMNS)} FROM _mlpipe_incoming
"""
# ``ON CONFLICT``: never an error for a row ``predictions`` holds already (its key gone
# missing: a drop of its day that did not get its lock deletes the day's keys first).
_INSERT_ALL = f"{_ROWS} ON CONFLICT DO NOTHING"
# When not every row claimed its key: the rows whose key holds their own ``ts`` (a row
# loaded before, a replay, conflicts and adds nothing; nor a repeat in the batch).
_INSERT_CLAIMED = f"""{_ROWS}
WHERE EXISTS (SELECT 1 FROM prediction_keys k WHERE k.request_id = _mlpipe_incoming.request_id
    AND k.tenant = _mlpipe_incoming.tenant AND k.model = _mlpipe_incoming.model
    AND k.arm = _mlpipe_incoming.arm AND k.ts = _mlpipe_incoming.ts)
ON CONFLICT DO NOTHING
"""


def copy_to_temporary(
    conn: Connection, table: pa.Table, columns: Sequence[str], create: str, name: str
) -> Any:
    """Create the temporary table ``name`` (``create``) and COPY ``table``'s ``columns``
    into it as CSV written by Arrow; returns the driver's (psycopg) connection."""
    import pyarrow.csv as pacsv

    data = io.BytesIO()
    pacsv.write_csv(table.select(list(columns)), data, pacsv.WriteOptions(include_header=False))
    raw = conn.connection.driver_connection
    assert raw is not None, "the connection is closed"
    with raw.cursor() as cur:
        cur.execute(create)
        with cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(data.getvalue())
    return raw


class PostgresDialect:
    """:class:`~mlpipe.warehouse._dialects.Dialect` for ``postgresql+psycopg://HOST/DB``."""

    name = "postgresql"
    opens_read_only = False
    loads_whole = False
    row_id = "ctid"

    def engine(self, url: str, read_only: bool) -> Engine:
        return sa.create_engine(url, poolclass=NullPool, connect_args={})

    def exists(self, url: str) -> bool:
        return True  # the server's; the tables are created on first use

    def insert_predictions(self, conn: Connection, table: pa.Table) -> int:
        """COPY the rows (as CSV, written by Arrow) into a temporary table, create the day
        partitions they need, then store the rows whose key is new in one statement: ~20 ×
        executemany's rate (``bench.kafka``). Returns the rows inserted.

        ``predictions`` is partitioned by day, so its own key holds ``ts`` and cannot
        see a request id stored on another day: each row first claims its key in
        ``prediction_keys`` (``ON CONFLICT DO NOTHING``: a key already stored, or
        claimed by a loader running at the same time, is not), and only the rows
        whose key holds their own ``ts`` are stored. Of a key the batch repeats, the
        first row counts, as on DuckDB.
        """
        raw = copy_to_temporary(
            conn,
            table,
            COLUMNS,
            "CREATE TEMPORARY TABLE _mlpipe_incoming (LIKE predictions INCLUDING DEFAULTS, "
            "_n BIGINT GENERATED ALWAYS AS IDENTITY) ON COMMIT DROP",
            "_mlpipe_incoming",
        )
        _partitions.ensure_days(conn, _partitions.days_of(conn, "_mlpipe_incoming"))
        with raw.cursor() as cur:
            cur.execute(_CLAIM)
            # Every key new (the usual batch): every row goes in, no lookup per row (~1.5 × as
            # fast as joining the keys claimed back to the rows).
            cur.execute(_INSERT_ALL if cur.rowcount == table.num_rows else _INSERT_CLAIMED)
            inserted: int = cur.rowcount
            cur.execute("DROP TABLE _mlpipe_incoming")
        return max(0, inserted)

    def reused_ids(self, conn: Connection, table: pa.Table) -> int:
        """The rows' keys COPYed into a temporary table and counted against
        ``prediction_keys`` in one statement (a replayed segment of 100k rows: ~28 s looked
        up a thousand keys at a time, under a second so)."""
        raw = copy_to_temporary(
            conn,
            table,
            [*_schema.PREDICTION_KEY, "ts"],
            "CREATE TEMPORARY TABLE _mlpipe_reused ON COMMIT DROP AS "
            f"SELECT {KEY_COLUMNS}, ts FROM prediction_keys WITH NO DATA",
            "_mlpipe_reused",
        )
        with raw.cursor() as cur:
            cur.execute(
                f"SELECT count(*) FROM _mlpipe_reused i JOIN prediction_keys p USING {KEY} "
                f"WHERE abs(extract(epoch FROM p.ts - i.ts)) * 1e6 > {REUSED_US}"
            )
            found = cur.fetchone()
            cur.execute("DROP TABLE _mlpipe_reused")
        return int(found[0]) if found else 0

    def insert_outcomes(self, conn: Connection, rows: pd.DataFrame) -> None:
        records = rows.astype(object).where(rows.notna(), None).to_dict("records")
        conn.execute(_schema.outcomes.insert(), records)

    def run_query(
        self, conn: Connection, sql: str, limit: int | None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """In a read-only transaction, as a prepared statement (which the server refuses to
        hold two of), its text passed as is (a ``%`` is not a parameter)."""
        import psycopg

        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        raw = conn.connection.driver_connection
        assert raw is not None, "a read connection is open"
        with raw.cursor() as cursor:
            try:
                cursor.execute(sql, prepare=True)
                if cursor.description is None:
                    return [], []
                columns = [c.name for c in cursor.description]
                rows = cursor.fetchmany(limit + 1) if limit is not None else cursor.fetchall()
            except psycopg.Error as exc:
                message = first_line(exc)
                if "multiple commands" in message:
                    message = "run one statement at a time"
                raise InvalidInput(f"query failed: {message}") from exc
        return columns, [tuple(r) for r in rows]

    def fetch_frame(
        self, conn: Connection, stmt: sa.Select[Any], sample: int | None, seed: int
    ) -> pd.DataFrame:
        import pandas as pd

        if sample is not None:
            rows = conn.execute(stmt.order_by(sa.func.random()).limit(sample)).all()
        else:
            rows = conn.execute(stmt.order_by(_schema.predictions.c.ts)).all()
        return pd.DataFrame(rows, columns=[c.name for c in stmt.selected_columns])
