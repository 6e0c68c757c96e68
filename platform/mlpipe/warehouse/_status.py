"""``mlpipe warehouse status``: what the warehouse holds, how it is partitioned, what retention
removed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from mlpipe.warehouse import _engine, _partitions, _schema
from mlpipe.warehouse._retention import PruneMark, marks_on

if TYPE_CHECKING:
    from mlpipe.config import Settings


@dataclass
class WarehouseStatus:
    """Row counts, day partitions (PostgreSQL), retention in force and what it removed."""

    backend: str  # "duckdb" | "postgresql"
    schema_version: int
    rows: dict[str, int]  # predictions, outcomes, quarantine
    retention_days: int | None  # the default (None: kept forever)
    tenant_retention: dict[str, int]
    # PostgreSQL: the days of the day partitions of ``predictions``, oldest first, and the rows
    # in its default partition (rows no day partition took); [] and None on DuckDB
    partition_days: list[date] = field(default_factory=list)
    default_partition_rows: int | None = None
    prunes: list[PruneMark] = field(default_factory=list)


def status(settings: Settings, notify: _engine.Notify | None = None) -> WarehouseStatus:
    """The warehouse as it is now; raises :class:`StoreUnavailable` when it cannot be read."""
    r = _schema.tenant_retention
    with _engine.read(settings, notify) as conn:
        rows = {
            t.name: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
            for t in (_schema.predictions, _schema.outcomes, _schema.quarantine)
        }
        found = WarehouseStatus(
            backend=make_url(settings.warehouse).get_backend_name(),
            schema_version=_schema.current_version(conn),
            rows=rows,
            retention_days=settings.warehouse_retention_days,
            tenant_retention={
                t.tenant: t.days
                for t in conn.execute(sa.select(r.c.tenant, r.c.days).order_by(r.c.tenant))
            },
        )
        if _partitions.is_partitioned(conn):
            found.partition_days = [p.day for p in _partitions.day_partitions(conn)]
            found.default_partition_rows = int(
                conn.exec_driver_sql(
                    f"SELECT count(*) FROM {_partitions.DEFAULT_PARTITION}"
                ).scalar_one()
            )
        found.prunes = marks_on(conn)
    return found
