"""What the monitoring checks share: logged rows to read, and where a result is kept.

Every check (drift, canary, skew) reads the warehouse's logged predictions of
one model, so it syncs first (unless told not to) and refuses a model with no
logged rows; and every result is a folder under ``reports_path`` plus one row
per verdict in the warehouse's ``reports`` index, which ``promote`` and
``monitor reports`` read.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe import warehouse
from mlpipe.errors import NotFound

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.windows import Window


def require_logged(
    settings: Settings, model: str, sync_first: bool, notify: warehouse.Notify | None
) -> None:
    """Sync the prediction log in (if ``sync_first``); NotFound if ``model`` has no rows."""
    if sync_first:
        warehouse.sync(settings, notify)
    known = warehouse.models_in_warehouse(settings, notify)
    if model not in known:
        raise NotFound(
            f"model {model!r} has no logged predictions "
            f"(the warehouse has: {', '.join(known) or 'none'})"
        )


def report_dir(settings: Settings, model: str, now: datetime) -> Path:
    """A new folder ``reports_path/<model>/<UTC time>[-n]`` for one check's files."""
    base = settings.reports_path / model / now.strftime("%Y%m%dT%H%M%SZ")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str))


def entry(
    kind: str,
    model: str,
    window: Window,
    created_at: datetime,
    verdict: str,
    path: Path,
    summary: dict[str, Any],
    *,
    arm: str | None = None,
    version: str | None = None,
) -> warehouse.ReportEntry:
    """One row of the ``reports`` index."""
    return warehouse.ReportEntry(
        id=uuid.uuid4().hex,
        kind=kind,
        model=model,
        arm=arm,
        version=version,
        window_start=window.start,
        window_end=window.end,
        created_at=created_at,
        verdict=verdict,
        path=str(path),
        summary=summary,
    )


__all__ = ["entry", "report_dir", "require_logged", "write_json"]
