"""Mirroring the control plane's deployment history into the warehouse's ``deployments`` table.

The control plane stays the source of truth; the mirror lets SQL over the
warehouse put predictions next to the deployment that served them (join on
model and generation). Rows are keyed by (model, generation), and generations
only grow, so the caller reads only the history newer than what is mirrored
(:func:`mirrored_generations`). The warehouse neither reads the control plane
nor calls back into the layer that does: the caller (a layer above,
:func:`mlpipe.deployments.history_feed`) reads the history and hands it to
:func:`mlpipe.warehouse.sync` as data.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from mlpipe.warehouse import _engine, _schema

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings


class DeploymentChange(Protocol):
    """One change of a deployment record, as the control plane's history holds it."""

    @property
    def model(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def action(self) -> str: ...
    @property
    def champion(self) -> str | None: ...
    @property
    def canary(self) -> str | None: ...
    @property
    def canary_weight(self) -> float: ...
    @property
    def shadow(self) -> str | None: ...
    @property
    def shadow_sample(self) -> float: ...
    @property
    def previous(self) -> str | None: ...
    @property
    def at(self) -> datetime: ...
    @property
    def actor(self) -> str: ...
    @property
    def reason(self) -> str | None: ...


# The control plane's changes a sync mirrors: those after :func:`mirrored_generations`
# (older ones, or ones mirrored meanwhile, are left out by their key).
HistorySource = Iterable[DeploymentChange]


def mirrored_generations(
    settings: Settings, notify: _engine.Notify | None = None
) -> dict[str, int]:
    """The newest generation the warehouse mirrors per model (a model it lacks: absent).

    Raises :class:`StoreUnavailable` when the warehouse cannot be read.
    """
    d = _schema.deployments
    with _engine.read(settings, notify) as conn:
        rows = conn.execute(sa.select(d.c.model, sa.func.max(d.c.generation)).group_by(d.c.model))
        return {str(model): int(generation) for model, generation in rows}


def table_rows(history: HistorySource) -> list[dict[str, Any]]:
    """The changes of ``history`` as ``deployments`` table values."""
    return [_row(change) for change in history]


def _row(change: DeploymentChange) -> dict[str, Any]:
    at = change.at.astimezone(UTC).replace(tzinfo=None) if change.at.tzinfo else change.at
    return {
        "model": change.model,
        "generation": change.generation,
        "champion": change.champion,
        "canary": change.canary,
        "canary_weight": change.canary_weight,
        "shadow": change.shadow,
        "shadow_sample": change.shadow_sample,
        "previous": change.previous,
        "action": change.action,
        "actor": change.actor,
        "reason": change.reason,
        "changed_at": at,
    }


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
