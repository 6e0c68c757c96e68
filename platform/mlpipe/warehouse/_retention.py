"""Warehouse retention: rows older than their tenant's retention are deleted, a chunk at a time.

``settings.warehouse_retention_days`` is the default (None keeps everything);
a tenant's own days (``tenant_retention``, set by ``mlpipe tenants add|set
--retention-days``) override it. A prediction's age is its ``ts``; an
outcome's, its ``outcome_ts`` (else when it was loaded). ``quarantine`` has no
tenant column, so its lines go after the shortest retention in force. Each
chunk of ``CHUNK_ROWS`` rows is deleted in its own short transaction (by
DuckDB's ``rowid`` / PostgreSQL's ``ctid``), so no lock is held for long and
an interrupted prune keeps what it did. PostgreSQL day partitions are not
used: old days are deleted row by row too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse import _engine, _schema

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings

CHUNK_ROWS = 10_000


@dataclass
class Pruned:
    """Rows deleted per table by one prune."""

    predictions: int = 0
    outcomes: int = 0
    quarantine: int = 0

    @property
    def rows(self) -> int:
        return self.predictions + self.outcomes + self.quarantine


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def check_retention_days(days: int | None) -> None:
    """A tenant's retention: days >= 1, or 0 for "the default again"; else InvalidInput."""
    if days is not None and days < 0:
        raise InvalidInput(f"--retention-days {days}: a number of days >= 1 (0: the default)")


def set_tenant_retention(settings: Settings, tenant: str, days: int) -> int | None:
    """Keep ``tenant``'s rows ``days`` days (0 removes the override); returns the days in force."""
    from mlpipe import security

    check_retention_days(days)
    if not any(t.name == tenant for t in security.list_tenants(settings)):
        raise NotFound(f"no tenant {tenant!r}")
    r = _schema.tenant_retention
    with _engine.write(settings) as conn:
        conn.execute(r.delete().where(r.c.tenant == tenant))
        if days:
            conn.execute(r.insert().values(tenant=tenant, days=days, updated_at=_now()))
    return days or settings.warehouse_retention_days


def tenant_retention(settings: Settings) -> dict[str, int]:
    """Each tenant's own retention in days (tenants without one follow the default)."""
    r = _schema.tenant_retention
    with _engine.read(settings) as conn:
        return {row.tenant: row.days for row in conn.execute(sa.select(r.c.tenant, r.c.days))}


def _delete_chunked(
    conn: Connection, table: sa.Table, where: sa.ColumnElement[bool], chunk: int
) -> int:
    row_id: sa.ColumnClause[Any] = sa.literal_column(
        "rowid" if conn.dialect.name == "duckdb" else "ctid"
    )
    ids = sa.select(row_id).select_from(table).where(where).limit(chunk)
    total = 0
    while True:
        with conn.begin():
            deleted = conn.execute(table.delete().where(row_id.in_(ids))).rowcount
        total += max(deleted, 0)
        if deleted < chunk:
            return total


def prune_rows(
    conn: Connection, settings: Settings, now: datetime, *, chunk: int = CHUNK_ROWS
) -> Pruned:
    """Delete the rows past their retention on ``conn``; nothing when none is set."""
    r = _schema.tenant_retention
    with conn.begin():
        overrides = {row.tenant: row.days for row in conn.execute(sa.select(r.c.tenant, r.c.days))}
    default = settings.warehouse_retention_days
    p, o, q = _schema.predictions, _schema.outcomes, _schema.quarantine
    pruned = Pruned()
    outcome_age = sa.func.coalesce(o.c.outcome_ts, o.c.loaded_at)
    policies: list[tuple[str | None, int | None]] = [(None, default), *overrides.items()]
    for tenant, days in policies:
        if days is None:
            continue
        cutoff = now - timedelta(days=days)
        p_who: sa.ColumnElement[bool]
        o_who: sa.ColumnElement[bool]
        if tenant is None:  # the default: every tenant without its own retention
            p_who = p.c.tenant.not_in(list(overrides)) if overrides else sa.true()
            o_who = o.c.tenant.not_in(list(overrides)) if overrides else sa.true()
        else:
            p_who, o_who = p.c.tenant == tenant, o.c.tenant == tenant
        pruned.predictions += _delete_chunked(conn, p, sa.and_(p_who, p.c.ts < cutoff), chunk)
        pruned.outcomes += _delete_chunked(conn, o, sa.and_(o_who, outcome_age < cutoff), chunk)
    shortest = min([*overrides.values(), *([default] if default is not None else [])], default=None)
    if shortest is not None:
        cutoff = now - timedelta(days=shortest)
        pruned.quarantine = _delete_chunked(conn, q, q.c.loaded_at < cutoff, chunk)
    return pruned


def prune(settings: Settings, notify: _engine.Notify | None = None) -> Pruned:
    """``mlpipe warehouse prune``: delete the rows past their retention now."""
    with _engine.writer(settings, notify) as conn:
        return prune_rows(conn, settings, _now())
