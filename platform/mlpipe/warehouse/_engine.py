"""Opening the warehouse: short-lived connections, a bounded wait on DuckDB's file lock.

DuckDB lets one process write a database file, or several read it, never both.
So every mlpipe command opens the file only for the moment it reads or writes
(``NullPool``: nothing stays open between calls) and, when another process holds
the lock, waits with backoff up to ``warehouse_lock_timeout_s`` and says so
through ``notify``, then gives up with :class:`StoreUnavailable`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from mlpipe.engines import redact
from mlpipe.errors import StoreUnavailable
from mlpipe.warehouse import _schema

if TYPE_CHECKING:
    import duckdb

    from mlpipe.config import Settings

Notify = Callable[[str], None]
_LOCK_MESSAGE = re.compile(r"Could not set lock on file|database is locked|Conflicting lock", re.I)
_engines: dict[tuple[str, bool], Engine] = {}
# DuckDB shares one database instance per file inside a process, and refuses a read-only
# and a read-write connection to it at once: threads of one process take turns.
_in_process = threading.RLock()


def is_duckdb(url: str) -> bool:
    return make_url(url).get_backend_name() == "duckdb"


def lock_timeout(settings: Settings) -> float:
    # Not (yet) a Settings field: read it with a default so older settings still work.
    return settings.warehouse_lock_timeout_s


def _engine(url: str, read_only: bool) -> Engine:
    key = (url, read_only)
    if key not in _engines:
        connect_args: dict[str, object] = {}
        if is_duckdb(url):
            database = make_url(url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            if read_only:
                # Ad-hoc SQL may read the warehouse, not the file system.
                connect_args = {"read_only": True, "config": {"enable_external_access": False}}
        _engines[key] = sa.create_engine(url, poolclass=NullPool, connect_args=connect_args)
    return _engines[key]


@contextmanager
def _connect(settings: Settings, read_only: bool, notify: Notify | None) -> Iterator[Connection]:
    with _in_process:
        with _connect_unlocked(settings, read_only, notify) as conn:
            yield conn


@contextmanager
def _connect_unlocked(
    settings: Settings, read_only: bool, notify: Notify | None
) -> Iterator[Connection]:
    url = settings.warehouse
    deadline = time.monotonic() + lock_timeout(settings)
    delay = 0.05
    said = False
    while True:
        try:
            conn = _engine(url, read_only).connect()
            break
        except DBAPIError as exc:
            if not _LOCK_MESSAGE.search(str(exc.orig)):
                raise StoreUnavailable(f"warehouse {redact(url)} unavailable: {exc.orig}") from exc
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"warehouse {redact(url)} is locked by another process for more than "
                    f"{lock_timeout(settings):.0f}s (another sync or monitor still running?)"
                ) from exc
            if not said and notify is not None:
                notify(
                    f"warehouse is in use by another mlpipe process; waiting up to "
                    f"{lock_timeout(settings):.0f}s for it"
                )
            said = True
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    try:
        yield conn
    finally:
        conn.close()


def _database_exists(url: str) -> bool:
    if not is_duckdb(url):
        return True
    database = make_url(url).database
    if not database or database == ":memory:":
        return False
    return Path(database).exists()


def duckdb_connection(conn: Connection) -> duckdb.DuckDBPyConnection:
    """The DuckDB connection under ``conn``, for DuckDB's own API (``register``, ``df()``)."""
    raw = conn.connection.driver_connection
    assert raw is not None, "the connection is closed"
    return raw


@contextmanager
def writer(settings: Settings, notify: Notify | None = None) -> Iterator[Connection]:
    """A write connection on a migrated warehouse, for a caller that commits in several steps.

    The caller opens each transaction (``with conn.begin():``); a failed write
    raises :class:`StoreUnavailable`.
    """
    with _connect(settings, False, notify) as conn:
        try:
            with conn.begin():
                _schema.migrate(conn)
            yield conn
        except DBAPIError as exc:
            raise StoreUnavailable(f"warehouse write failed: {exc.orig}") from exc


@contextmanager
def write(settings: Settings, notify: Notify | None = None) -> Iterator[Connection]:
    """A write transaction on a migrated warehouse: commit on success, roll back on error."""
    with writer(settings, notify) as conn, conn.begin():
        yield conn


@contextmanager
def read(settings: Settings, notify: Notify | None = None) -> Iterator[Connection]:
    """A read-only connection (DuckDB opens the file read-only: several readers may share it).

    A warehouse that does not exist yet, or is behind the newest migration, is
    created/migrated first with a short write.
    """
    url = settings.warehouse
    if not is_duckdb(url):
        with _connect(settings, False, notify) as conn, conn.begin() as tx:
            _schema.migrate(conn)
            yield conn
            tx.rollback()
        return
    if _database_exists(url):
        # The usual case, one connection: the schema is current, read on the same one.
        with _connect(settings, True, notify) as conn:
            if _schema.current_version(conn) >= _schema.HEAD:
                yield conn
                return
    with write(settings, notify):
        pass
    with _connect(settings, True, notify) as conn:
        yield conn
