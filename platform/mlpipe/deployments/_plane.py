"""The control plane a process talks to: one :class:`ControlPlane` per URL, kept for the process."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from mlpipe.config import Settings
from mlpipe.deployments._store import ControlPlane


@lru_cache(maxsize=8)
def plane_for(url: str) -> ControlPlane:
    """The control plane behind ``url`` (its tables created on first use)."""
    return ControlPlane(url)


def control_plane(settings: Settings) -> ControlPlane:
    """The control plane the settings name (one per URL per process)."""
    return plane_for(settings.control)


def never_deployed(settings: Settings) -> bool:
    """Whether the settings name a local SQLite control database that does not exist yet.

    Readers that only look (the warehouse mirror) check this first, so that a
    project that never deployed does not get an empty control database.
    """
    url = settings.control
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()
