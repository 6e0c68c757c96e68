"""SQLAlchemy engines for the control plane (SQLite WAL or PostgreSQL) and a transaction scope."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, create_engine, event
from sqlalchemy.exc import OperationalError

from mlpipe.errors import StoreUnavailable


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One engine per URL per process. SQLite gets WAL and ``BEGIN IMMEDIATE``.

    A deferred SQLite transaction that upgrades to a write can fail with
    SQLITE_BUSY whatever the busy timeout, so every transaction takes the write
    lock when it begins; concurrent writers then queue on the busy timeout.
    """
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        _make_sqlite_transactional(engine)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _make_sqlite_transactional(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy's BEGIN below rule
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def transaction(url: str) -> Iterator[Connection]:
    """Commit on success, roll back and re-raise on error; unreachable store → StoreUnavailable."""
    try:
        with engine_for(url).begin() as conn:
            yield conn
    except OperationalError as exc:
        raise StoreUnavailable(f"control plane {redact(url)} unavailable: {exc.orig}") from exc


def create_tables(url: str, metadata: MetaData) -> None:
    """Create the tables of ``metadata`` that do not exist yet; StoreUnavailable if unreachable."""
    try:
        metadata.create_all(engine_for(url))
    except OperationalError as exc:
        raise StoreUnavailable(f"control plane {redact(url)} unavailable: {exc.orig}") from exc


def redact(url: str) -> str:
    """Hide a password in a URL before it reaches a message."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


__all__ = ["create_tables", "engine_for", "redact", "transaction"]
