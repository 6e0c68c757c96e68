"""The history the warehouse mirrors: the control plane's changes after what it holds."""

from __future__ import annotations

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.deployments._plane import control_plane, never_deployed
from mlpipe.deployments._record import HistoryEntry


def history_feed(settings: Settings, notify: warehouse.Notify | None = None) -> list[HistoryEntry]:
    """What ``warehouse.sync(..., history=)`` mirrors into its ``deployments`` table.

    Read now, per deployed model: only the history newer than the generation the
    warehouse already has (:func:`mlpipe.warehouse.mirrored_generations`), oldest
    first. A local project that never deployed has no control database: the feed
    is empty rather than create one (nor is the warehouse read). It raises what
    the control plane and the warehouse raise (StoreUnavailable).
    """
    if never_deployed(settings):
        return []
    mirrored = warehouse.mirrored_generations(settings, notify)
    plane = control_plane(settings)
    changes: list[HistoryEntry] = []
    for record in plane.models():
        seen = mirrored.get(record.model, 0)
        behind = record.generation - seen
        if behind > 0:
            newest_first = plane.history(record.model, limit=behind)
            changes.extend(e for e in reversed(newest_first) if e.generation > seen)
    return changes
