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
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from mlpipe.engines import redact
from mlpipe.errors import StoreUnavailable
from mlpipe.warehouse import _dialects, _schema

if TYPE_CHECKING:
    from mlpipe.config import Settings

Notify = Callable[[str], None]
_LOCK_MESSAGE = re.compile(r"Could not set lock on file|database is locked|Conflicting lock", re.I)
_engines: dict[tuple[str, bool], Engine] = {}
# DuckDB shares one database instance per file inside a process, and refuses a read-only
# and a read-write connection to it at once: threads of one process take turns.
_in_process = threading.RLock()


def lock_timeout(settings: Settings) -> float:
    # Not (yet) a Settings field: read it with a default so older settings still work.
    return settings.warehouse_lock_timeout_s


def _engine(url: str, read_only: bool) -> Engine:
    key = (url, read_only)
    if key not in _engines:
        _engines[key] = _dialects.dialect_for(url).engine(url, read_only)
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
    dialect = _dialects.dialect_for(settings.warehouse)
    if not dialect.opens_read_only:
        with _connect(settings, False, notify) as conn, conn.begin() as tx:
            _schema.migrate(conn)
            yield conn
            tx.rollback()
        return
    if dialect.exists(settings.warehouse):
        # The usual case, one connection: the schema is current, read on the same one.
        with _connect(settings, True, notify) as conn:
            if _schema.current_version(conn) >= _schema.HEAD:
                yield conn
                return
    with write(settings, notify):
        pass
    with _connect(settings, True, notify) as conn:
        yield conn
