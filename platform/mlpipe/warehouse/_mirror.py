"""Mirroring the control plane's deployment history into the warehouse's ``deployments`` table.

The control plane stays the source of truth; the mirror lets SQL over the
warehouse put predictions next to the deployment that served them (join on
model and generation). Rows are keyed by (model, generation), and generations
only grow, so each sync reads just the history newer than what is mirrored.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mlpipe.warehouse import _schema

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings


def _never_deployed(settings: Settings) -> bool:
    # A local project that never deployed has no control database: do not create one.
    url = settings.control
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


def mirrored_generations(conn: Connection) -> dict[str, int]:
    d = _schema.deployments
    rows = conn.execute(sa.select(d.c.model, sa.func.max(d.c.generation)).group_by(d.c.model))
    return {str(model): int(generation) for model, generation in rows}


def pending_history(settings: Settings, mirrored: dict[str, int]) -> list[dict[str, Any]]:
    """History rows the warehouse lacks, oldest first, as ``deployments`` table values.

    Raises what the control plane raises (:class:`StoreUnavailable` when it is down).
    """
    if _never_deployed(settings):
        return []
    from mlpipe import deployments

    plane = deployments.control_plane(settings)
    rows: list[dict[str, Any]] = []
    for record in plane.models():
        behind = record.generation - mirrored.get(record.model, 0)
        if behind <= 0:
            continue
        for entry in reversed(plane.history(record.model, limit=behind)):
            if entry.generation <= mirrored.get(record.model, 0):
                continue
            at = entry.at.astimezone(UTC).replace(tzinfo=None) if entry.at.tzinfo else entry.at
            rows.append(
                {
                    "model": entry.model,
                    "generation": entry.generation,
                    "champion": entry.champion,
                    "canary": entry.canary,
                    "canary_weight": entry.canary_weight,
                    "shadow": entry.shadow,
                    "shadow_sample": entry.shadow_sample,
                    "previous": entry.previous,
                    "action": entry.action,
                    "actor": entry.actor,
                    "reason": entry.reason,
                    "changed_at": at,
                }
            )
    return rows


def insert_missing(conn: Connection, rows: list[dict[str, Any]]) -> int:
    """Insert the rows whose (model, generation) is not there yet; returns how many went in."""
    if not rows:
        return 0
    d = _schema.deployments
    have = {
        (str(m), int(g))
        for m, g in conn.execute(
            sa.select(d.c.model, d.c.generation).where(d.c.model.in_({r["model"] for r in rows}))
        )
    }
    fresh = [r for r in rows if (r["model"], r["generation"]) not in have]
    if fresh:
        conn.execute(d.insert(), fresh)
    return len(fresh)
