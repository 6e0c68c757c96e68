"""Live per-arm figures of a model from the ``predictions`` table (what ``status`` shows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from mlpipe.config import Settings
from mlpipe.warehouse import _engine, _schema


@dataclass(frozen=True)
class ArmFigures:
    arm: str
    version: str
    requests: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None
    last_seen: datetime | None


def arm_figures(settings: Settings, model: str, since: datetime) -> list[ArmFigures]:
    """Requests, errors and latency percentiles per (arm, version) since ``since`` (naive UTC).

    Reads what the last ``warehouse sync`` loaded; it does not sync.
    """
    p = _schema.predictions
    query = (
        sa.select(
            p.c.arm,
            p.c.version,
            sa.func.count().label("requests"),
            sa.func.sum(sa.case((p.c.status != "ok", 1), else_=0)).label("errors"),
            sa.func.percentile_cont(0.5).within_group(p.c.latency_ms).label("p50"),
            sa.func.percentile_cont(0.99).within_group(p.c.latency_ms).label("p99"),
            sa.func.max(p.c.ts).label("last_seen"),
        )
        .where(p.c.model == model, p.c.ts >= since)
        .group_by(p.c.arm, p.c.version)
        .order_by(p.c.arm, p.c.version)
    )
    with _engine.read(settings) as conn:
        rows = conn.execute(query).all()
    return [
        ArmFigures(
            arm=r.arm,
            version=r.version,
            requests=int(r.requests),
            errors=int(r.errors or 0),
            p50_ms=None if r.p50 is None else float(r.p50),
            p99_ms=None if r.p99 is None else float(r.p99),
            last_seen=r.last_seen,
        )
        for r in rows
    ]
