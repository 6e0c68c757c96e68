"""Mirroring the control plane's deployment history into the warehouse's ``deployments`` table.

The control plane stays the source of truth; the mirror lets SQL over the
warehouse put predictions next to the deployment that served them (join on
model and generation). Rows are keyed by (model, generation), and generations
only grow, so a sync asks its :data:`HistorySource` only for the history newer
than what is mirrored. The warehouse does not read the control plane itself:
the caller (a layer above, :func:`mlpipe.deployments.history_feed`) hands the
history in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from mlpipe.warehouse import _schema

if TYPE_CHECKING:
    from sqlalchemy import Connection


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


# Given the newest generation mirrored per model (absent: none), the changes after it.
HistorySource = Callable[[Mapping[str, int]], Iterable[DeploymentChange]]


def mirrored_generations(conn: Connection) -> dict[str, int]:
    d = _schema.deployments
    rows = conn.execute(sa.select(d.c.model, sa.func.max(d.c.generation)).group_by(d.c.model))
    return {str(model): int(generation) for model, generation in rows}


def pending_rows(history: HistorySource, mirrored: Mapping[str, int]) -> list[dict[str, Any]]:
    """The changes ``history`` gives after ``mirrored``, as ``deployments`` table values.

    Raises what the source raises (:class:`StoreUnavailable` when the control plane is down).
    """
    return [_row(change) for change in history(mirrored)]


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
