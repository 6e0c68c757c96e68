"""What differs between the warehouse's two backends, chosen once from the URL's scheme.

DuckDB (embedded, the default: :mod:`._duckdb`) and PostgreSQL (production:
:mod:`._postgres`) share the tables and most SQL, written with SQLAlchemy Core.
Where they differ (how an engine opens, how rows go in, how ad-hoc SQL and
windows of predictions are read) the code asks the :class:`Dialect` of its
warehouse, looked up by scheme in :data:`DIALECTS` as MLflow maps a store URI's
scheme to its store. The schema's migrations (:mod:`._schema`) are history:
each step names the backend it changes. PostgreSQL's day partitions are
:mod:`._partitions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.engine import make_url

from mlpipe.engines import redact
from mlpipe.errors import InvalidInput
from mlpipe.warehouse._duckdb import DuckDBDialect
from mlpipe.warehouse._postgres import PostgresDialect

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import sqlalchemy as sa
    from sqlalchemy import Connection, Engine


class Dialect(Protocol):
    """One backend's way of doing what the warehouse does differently on it."""

    name: str  # SQLAlchemy's backend name, the scheme's first part
    # Reads open the database read-only (several readers share a DuckDB file); else they
    # run in a transaction that is rolled back, after the migrations.
    opens_read_only: bool
    # Reads log files and Kafka batches itself, in one INSERT (decision 015).
    loads_whole: bool
    row_id: str  # the column that names a row, for deletes in chunks

    def engine(self, url: str, read_only: bool) -> Engine:
        """A new engine on ``url`` (no pool: nothing stays open between calls)."""
        ...

    def exists(self, url: str) -> bool:
        """Whether the database is there (else a read creates it with a short write first)."""
        ...

    def insert_predictions(self, conn: Connection, table: pa.Table) -> int:
        """Insert the rows whose key (request_id, tenant, model, arm) ``predictions`` lacks,
        the first row of a key the batch repeats; returns how many went in."""
        ...

    def reused_ids(self, conn: Connection, table: pa.Table) -> int:
        """How many rows of ``table``, just inserted, were left out because another request
        (``ts`` more than 1 ms apart) holds their key."""
        ...

    def insert_outcomes(self, conn: Connection, rows: pd.DataFrame) -> None:
        """Insert ``outcomes`` rows (their columns named as the table's)."""
        ...

    def run_query(
        self, conn: Connection, sql: str, limit: int | None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one reading statement: its columns and up to ``limit + 1`` rows; raises
        :class:`InvalidInput` with the first line of the database's error."""
        ...

    def fetch_frame(
        self, conn: Connection, stmt: sa.Select[Any], sample: int | None, seed: int
    ) -> pd.DataFrame:
        """The rows of ``stmt`` in time order, or a random sample of ``sample`` of them."""
        ...


DIALECTS: dict[str, Dialect] = {"duckdb": DuckDBDialect(), "postgresql": PostgresDialect()}


def dialect_for(url: str) -> Dialect:
    """The dialect of a warehouse URL; raises :class:`InvalidInput` for another backend."""
    backend = make_url(url).get_backend_name()
    if backend not in DIALECTS:
        raise InvalidInput(
            f"warehouse {redact(url)}: {backend} is not a warehouse backend "
            f"(one of: {', '.join(DIALECTS)})"
        )
    return DIALECTS[backend]


def dialect_of(conn: Connection) -> Dialect:
    """The dialect of an open warehouse connection."""
    return DIALECTS[conn.dialect.name]
