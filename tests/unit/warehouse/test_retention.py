"""Retention: rows past their tenant's retention removed (in chunks, or whole days on
PostgreSQL), what was removed recorded, younger rows kept."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._retention import PruneMark, _now, check_retention_days, prune_rows
from tests.unit.warehouse.logged import records, write_segment

DAY = 86400.0


def test_a_negative_retention_is_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        check_retention_days(-1)
    assert str(caught.value) == "--retention-days -1: a number of days >= 1 (0: the default)"
    check_retention_days(0)  # 0: back to the default
    check_retention_days(None)


def test_a_mark_says_whose_rows_and_since_when() -> None:
    cutoff = datetime(2026, 1, 2, 10, 0)
    default = PruneMark(None, 30, cutoff, cutoff, 5, 9)
    acme = PruneMark("acme", 5, cutoff, cutoff, 1, 1)
    assert default.note == "rows before 2026-01-02 10:00 UTC pruned (retention 30 day(s))"
    assert acme.note == "tenant acme's rows before 2026-01-02 10:00 UTC pruned (retention 5 day(s))"
    assert default.covers(cutoff - timedelta(seconds=1)) and not default.covers(cutoff)


def _load(settings: Settings) -> None:
    """Three rows 1 day old and three 10 days old, for tenants ``acme`` and ``globex``."""
    now = time.time()
    logged = [
        r
        for tenant in ("acme", "globex")
        for age in (1, 10)
        for r in records(3, f"{tenant}-{age}-", tenant=tenant, start=now - age * DAY)
    ]
    write_segment(settings, "s.jsonl", logged)
    warehouse.sync(settings)


def _left(settings: Settings) -> list[tuple[str, int]]:
    p = _schema.predictions
    with _engine.read(settings) as conn:
        rows = conn.execute(sa.select(p.c.tenant, sa.func.count()).group_by(p.c.tenant)).all()
    return sorted((t, n) for t, n in rows)


def test_without_a_retention_nothing_is_removed(settings: Settings) -> None:
    _load(settings)
    assert warehouse.prune(settings).rows == 0
    assert warehouse.prune_marks(settings) == []
    assert _left(settings) == [("acme", 6), ("globex", 6)]


def test_rows_past_the_default_and_a_tenants_own_retention_go_in_chunks(
    settings: Settings,
) -> None:
    _load(settings)
    with _engine.write(settings) as conn:  # acme keeps 30 days (a tenant's own retention)
        conn.execute(
            _schema.tenant_retention.insert().values(tenant="acme", days=30, updated_at=_now())
        )
    settings = settings.model_copy(update={"warehouse_retention_days": 5})
    with _engine.writer(settings) as conn:
        pruned = prune_rows(conn, settings, _now(), chunk=2)  # two chunks and a short one
    assert pruned.predictions == 3
    assert _left(settings) == [("acme", 6), ("globex", 3)]
    marks = [(m.tenant, m.days, m.rows) for m in warehouse.prune_marks(settings)]
    assert marks == [(None, 5, 3), ("acme", 30, 0)]
    latest = warehouse.latest_prune_cutoff(settings)
    assert latest is not None and (latest.tenant, latest.days) == (None, 5)
    assert warehouse.prune(settings).rows == 0  # nothing left past retention
