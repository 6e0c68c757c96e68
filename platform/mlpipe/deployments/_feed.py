"""The history feed the warehouse mirrors: the control plane's changes after what it holds."""

from __future__ import annotations

from collections.abc import Mapping

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.deployments._plane import control_plane, never_deployed
from mlpipe.deployments._record import HistoryEntry


def history_feed(settings: Settings) -> warehouse.HistorySource:
    """What ``warehouse.sync(..., history=)`` mirrors into its ``deployments`` table.

    The feed reads, per deployed model, only the history newer than the
    generation the warehouse already has, oldest first. A local project that
    never deployed has no control database: the feed gives nothing rather than
    create one. It raises what the control plane raises (StoreUnavailable).
    """

    def changes_after(mirrored: Mapping[str, int]) -> list[HistoryEntry]:
        if never_deployed(settings):
            return []
        plane = control_plane(settings)
        changes: list[HistoryEntry] = []
        for record in plane.models():
            seen = mirrored.get(record.model, 0)
            behind = record.generation - seen
            if behind > 0:
                newest_first = plane.history(record.model, limit=behind)
                changes.extend(e for e in reversed(newest_first) if e.generation > seen)
        return changes

    return changes_after
