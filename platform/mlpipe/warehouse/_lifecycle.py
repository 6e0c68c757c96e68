"""What a sync does after loading: release loaded segments, prune rows past retention.

One call from :func:`mlpipe.warehouse.sync`, on its write connection, so the
warehouse is opened once (docs/data-lifecycle.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from mlpipe.warehouse._release import release_loaded
from mlpipe.warehouse._retention import prune_rows

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings
    from mlpipe.warehouse._sync import SyncResult


def after_sync(conn: Connection, settings: Settings, now: datetime, result: SyncResult) -> None:
    """Release the segments loaded long enough ago and prune the rows past their retention;
    record what was done in ``result``."""
    released = release_loaded(conn, settings, now)
    result.segments_released = released.segments
    result.bytes_released = released.bytes
    result.rows_pruned = prune_rows(conn, settings, now).rows
