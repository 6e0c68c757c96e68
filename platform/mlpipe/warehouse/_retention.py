"""Warehouse retention: rows older than their tenant's retention are removed.

``settings.warehouse_retention_days`` is the default (None keeps everything);
a tenant's own days (``tenant_retention``, set by ``mlpipe tenants add|set
--retention-days``) override it. A prediction's age is its ``ts``; an
outcome's, its ``outcome_ts`` (else when it was loaded). ``quarantine`` has no
tenant column, so its lines go after the shortest retention in force.

On PostgreSQL ``predictions`` is partitioned by day (:mod:`._partitions`): a
day that has passed the retention of every tenant with rows in it is dropped
whole (its keys first, then the partition: one short lock on the table). A
day that still holds rows some tenant keeps (a tenant with a longer
retention, or none) is not dropped; its expired rows go row by row, like
everything on DuckDB and in ``outcomes`` and ``quarantine``: ``CHUNK_ROWS``
rows at a time, each chunk in its own short transaction (by DuckDB's
``rowid`` / PostgreSQL's ``ctid``, one partition at a time), so no lock is
held for long and an interrupted prune keeps what it did.

Each prune records, per retention in force, its cutoff and the rows it
removed (``retention_prunes``): :func:`latest_prune_cutoff` tells a report
over an older window that some of its rows are gone.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse import _dialects, _engine, _partitions, _schema

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings

CHUNK_ROWS = 10_000


@dataclass
class Pruned:
    """Rows removed per table by one prune, and the day partitions it dropped (PostgreSQL;
    their rows are counted in ``predictions``)."""

    predictions: int = 0
    outcomes: int = 0
    quarantine: int = 0
    partitions: int = 0

    @property
    def rows(self) -> int:
        return self.predictions + self.outcomes + self.quarantine


@dataclass(frozen=True)
class PruneMark:
    """What retention last removed under one retention in force: the rows (predictions and
    outcomes) of ``tenant`` (None: every tenant without its own) older than ``cutoff``."""

    tenant: str | None
    days: int
    cutoff: datetime  # UTC, naive
    pruned_at: datetime
    rows: int  # by the prune at ``pruned_at``
    rows_total: int  # by every prune since the first

    @property
    def note(self) -> str:
        """``rows before 2026-01-02 10:00 UTC pruned (retention 30 day(s))``, naming the
        tenant for a tenant's own retention."""
        who = "rows" if self.tenant is None else f"tenant {self.tenant}'s rows"
        return (
            f"{who} before {self.cutoff:%Y-%m-%d %H:%M} UTC pruned (retention {self.days} day(s))"
        )

    def covers(self, start: datetime) -> bool:
        """Whether a window from ``start`` (UTC, naive) reaches back past the cutoff, so
        some of its rows were pruned."""
        return start < self.cutoff


@dataclass(frozen=True)
class _Policy:
    """One retention in force: ``tenant``'s own, or (None) the default for every tenant
    without one (``overrides``: the tenants with their own)."""

    tenant: str | None
    days: int
    cutoff: datetime
    overrides: tuple[str, ...]

    def who(self, tenant: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        if self.tenant is not None:
            return tenant == self.tenant
        return tenant.not_in(self.overrides) if self.overrides else sa.true()


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
    conn: Connection, table: sa.TableClause, where: sa.ColumnElement[bool], chunk: int
) -> int:
    row_id: sa.ColumnClause[Any] = sa.literal_column(_dialects.dialect_of(conn).row_id)
    ids = sa.select(row_id).select_from(table).where(where).limit(chunk)
    total = 0
    while True:
        with conn.begin():
            deleted = conn.execute(table.delete().where(row_id.in_(ids))).rowcount
        total += max(deleted, 0)
        if deleted < chunk:
            return total


def _policies(conn: Connection, settings: Settings, now: datetime) -> list[_Policy]:
    r = _schema.tenant_retention
    overrides = {row.tenant: row.days for row in conn.execute(sa.select(r.c.tenant, r.c.days))}
    default = settings.warehouse_retention_days
    others = tuple(sorted(overrides))
    found = [_Policy(None, default, now - timedelta(days=default), others)] if default else []
    for tenant, days in sorted(overrides.items()):
        found.append(_Policy(tenant, days, now - timedelta(days=days), others))
    return found


def _partition(name: str) -> sa.TableClause:
    return sa.table(name, sa.column("tenant"), sa.column("ts"))


def _keepers(
    policies: list[_Policy], part: _partitions.DayPartition, table: sa.TableClause
) -> sa.ColumnElement[bool] | None:
    """The rows of ``part`` some tenant still keeps (a retention that has not passed the
    whole day, or no retention at all); None when there are none."""
    keep = [p.who(table.c.tenant) for p in policies if p.cutoff < part.end]
    default = next((p for p in policies if p.tenant is None), None)
    if default is None:  # tenants without their own retention keep everything
        overrides = tuple(p.tenant for p in policies if p.tenant is not None)
        keep.append(table.c.tenant.not_in(overrides) if overrides else sa.true())
    return sa.or_(*keep) if keep else None


# A table rows past retention may be in, and the earliest ``ts`` it can hold (None: any).
_Holder = tuple[sa.TableClause, datetime | None]


def _drop_days(
    conn: Connection, policies: list[_Policy], chunk: int, pruned: Pruned, rows: Counter[str | None]
) -> list[_Holder]:
    """Drop each day partition past every retention that holds rows in it; returns the
    partitions (and the default one) left that may hold rows past some retention."""
    with conn.begin():
        parts = _partitions.day_partitions(conn)
    latest_cutoff = max(p.cutoff for p in policies)
    left: list[_Holder] = [(_partition(_partitions.DEFAULT_PARTITION), None)]
    own = {p.tenant for p in policies if p.tenant is not None}
    for part in parts:
        if part.start >= latest_cutoff:
            break  # this day and every later one: no row past any retention
        table = _partition(part.name)
        keepers = _keepers(policies, part, table)
        if keepers is not None:
            with conn.begin():
                rows_kept = sa.select(sa.literal(1)).select_from(table).where(keepers)
                kept = conn.execute(sa.select(sa.exists(rows_kept))).scalar()
            if kept:
                left.append((table, part.start))
                continue
        tenants = _partitions.drop_day(conn, part, chunk)
        if tenants is None:  # the table stayed busy: delete its rows instead
            left.append((table, part.start))
            continue
        pruned.partitions += 1
        for tenant, n in tenants.items():
            pruned.predictions += n
            rows[tenant if tenant in own else None] += n
    return left


def _mark(
    conn: Connection, policies: list[_Policy], rows: Counter[str | None], now: datetime
) -> None:
    """Record each retention's cutoff and what it removed in ``retention_prunes``."""
    m = _schema.retention_prunes
    with conn.begin():
        held = conn.execute(sa.select(m.c.tenant, m.c.rows_total))
        totals = {r.tenant: r.rows_total for r in held}
        for policy in policies:
            key = policy.tenant or ""
            n = rows[policy.tenant]
            values = {
                "days": policy.days,
                "cutoff": policy.cutoff,
                "pruned_at": now,
                "rows": n,
                "rows_total": totals.get(key, 0) + n,
            }
            if key in totals:
                conn.execute(m.update().where(m.c.tenant == key).values(**values))
            else:
                conn.execute(m.insert().values(tenant=key, **values))


def prune_rows(
    conn: Connection, settings: Settings, now: datetime, *, chunk: int = CHUNK_ROWS
) -> Pruned:
    """Remove the rows past their retention on ``conn``; nothing when none is set."""
    with conn.begin():
        policies = _policies(conn, settings, now)
        partitioned = bool(policies) and _partitions.is_partitioned(conn)
    pruned = Pruned()
    if not policies:
        return pruned
    rows: Counter[str | None] = Counter()
    p, o, q = _schema.predictions, _schema.outcomes, _schema.quarantine
    tables: list[_Holder] = [(p, None)]
    if partitioned:
        tables = _drop_days(conn, policies, chunk, pruned, rows)
    outcome_age = sa.func.coalesce(o.c.outcome_ts, o.c.loaded_at)
    for policy in policies:
        for table, start in tables:
            if start is not None and start >= policy.cutoff:
                continue  # a day younger than this retention: nothing of it is past it
            where = sa.and_(policy.who(table.c.tenant), table.c.ts < policy.cutoff)
            n = _delete_chunked(conn, table, where, chunk)
            pruned.predictions += n
            rows[policy.tenant] += n
        where = sa.and_(policy.who(o.c.tenant), outcome_age < policy.cutoff)
        n = _delete_chunked(conn, o, where, chunk)
        pruned.outcomes += n
        rows[policy.tenant] += n
    shortest = max(p.cutoff for p in policies)
    pruned.quarantine = _delete_chunked(conn, q, q.c.loaded_at < shortest, chunk)
    _mark(conn, policies, rows, now)
    return pruned


def prune(settings: Settings, notify: _engine.Notify | None = None) -> Pruned:
    """``mlpipe warehouse prune``: remove the rows past their retention now; raises
    :class:`StoreUnavailable` when the warehouse cannot be written."""
    with _engine.writer(settings, notify) as conn:
        return prune_rows(conn, settings, _now())


def prune_marks(settings: Settings) -> list[PruneMark]:
    """What retention last removed, per retention in force when it ran (the default first)."""
    with _engine.read(settings) as conn:
        return marks_on(conn)


def marks_on(conn: Connection) -> list[PruneMark]:
    """:func:`prune_marks` on an open connection."""
    m = _schema.retention_prunes
    return [
        PruneMark(r.tenant or None, r.days, r.cutoff, r.pruned_at, r.rows, r.rows_total)
        for r in conn.execute(sa.select(m).order_by(m.c.tenant))
    ]


def latest_prune_cutoff(settings: Settings) -> PruneMark | None:
    """The prune mark with the latest cutoff (the shortest retention): a window that starts
    before its cutoff has lost some tenant's rows. None before any prune with a retention."""
    marks = prune_marks(settings)
    return max(marks, key=lambda m: m.cutoff) if marks else None
