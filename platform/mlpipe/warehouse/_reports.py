"""The ``reports`` index: one row per monitoring verdict, with where its report is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mlpipe.warehouse import _engine, _schema

if TYPE_CHECKING:
    from mlpipe.config import Settings


@dataclass(frozen=True)
class ReportEntry:
    """A row of the ``reports`` index."""

    id: str
    kind: str  # "drift", "canary", "skew", "rollout"
    model: str
    arm: str | None
    version: str | None
    window_start: datetime | None
    window_end: datetime | None
    created_at: datetime
    verdict: str
    path: str | None
    summary: dict[str, Any]


def record_reports(
    settings: Settings, entries: list[ReportEntry], notify: _engine.Notify | None = None
) -> None:
    """Add rows to the ``reports`` index, in one transaction."""
    with _engine.write(settings, notify) as conn:
        for e in entries:
            conn.execute(
                _schema.reports.insert().values(
                    id=e.id,
                    kind=e.kind,
                    model=e.model,
                    arm=e.arm,
                    version=e.version,
                    window_start=e.window_start,
                    window_end=e.window_end,
                    created_at=e.created_at,
                    verdict=e.verdict,
                    path=e.path,
                    summary=json.dumps(e.summary, default=str),
                )
            )


def list_reports(
    settings: Settings,
    model: str | None = None,
    kind: str | None = None,
    version: str | None = None,
    limit: int = 20,
    notify: _engine.Notify | None = None,
) -> list[ReportEntry]:
    """Newest first."""
    r = _schema.reports
    stmt = sa.select(r).order_by(r.c.created_at.desc(), r.c.id.desc()).limit(limit)
    if model is not None:
        stmt = stmt.where(r.c.model == model)
    if kind is not None:
        stmt = stmt.where(r.c.kind == kind)
    if version is not None:
        stmt = stmt.where(r.c.version == version)
    with _engine.read(settings, notify) as conn:
        rows = conn.execute(stmt).all()
    return [
        ReportEntry(
            id=row.id,
            kind=row.kind,
            model=row.model,
            arm=row.arm,
            version=row.version,
            window_start=row.window_start,
            window_end=row.window_end,
            created_at=row.created_at,
            verdict=row.verdict,
            path=row.path,
            summary=json.loads(row.summary),
        )
        for row in rows
    ]
