"""Releasing prediction-log segments the warehouse holds: the log directory stays bounded.

A closed segment (``.jsonl``) whose size on disk is the size the ``segments``
table recorded when it was loaded whole holds no row the warehouse lacks; once
``predlog.keep_loaded_hours`` have passed since that load it is deleted, or
moved under ``predlog.archive_dir`` (same relative path) when that is set.
An open segment, a segment never loaded, or one that changed size since it
was loaded (so loaded only in part) is never touched, whatever its age: a
worker killed mid-write leaves an ``.open`` file that stays until it is closed
and loaded. A closed segment never grows (workers only append to ``.open``
files, and a closed name is new), so equal sizes mean equal bytes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._segments import segment_files, segment_size

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings


@dataclass
class Released:
    """What one release did: segments deleted or archived, and their bytes."""

    segments: int = 0
    bytes: int = 0
    archived: bool = False


def release_loaded(conn: Connection, settings: Settings, now: datetime) -> Released:
    """Delete (or archive) the closed segments loaded whole at least ``keep_loaded_hours`` ago.

    ``now`` is naive UTC, as ``segments.loaded_at``. Reads the ``segments``
    table on ``conn`` (in a transaction of its own); the files go after it.
    """
    root = settings.predlog_path
    cutoff = now - timedelta(hours=settings.predlog.keep_loaded_hours)
    seg = _schema.segments
    with conn.begin():
        loaded = {
            row.path: row.size
            for row in conn.execute(
                sa.select(seg.c.path, seg.c.size).where(seg.c.loaded_at <= cutoff)
            )
        }
    archive = settings.path(settings.predlog.archive_dir) if settings.predlog.archive_dir else None
    done = Released(archived=archive is not None)
    for path in segment_files(root):
        if not path.name.endswith(".jsonl"):
            continue  # still open: it may grow
        rel = path.relative_to(root).as_posix()
        size = segment_size(path)
        if size is None or loaded.get(rel) != size:
            continue  # not loaded whole at its current size (or gone meanwhile)
        _let_go(path, None if archive is None else archive / rel)
        done.segments += 1
        done.bytes += size
    return done


def _let_go(path: Path, archived: Path | None) -> None:
    if archived is None:
        path.unlink(missing_ok=True)
        return
    archived.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(path, archived)
    except OSError:  # another file system: copy, then delete
        shutil.copy2(path, archived)
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class LogUsage:
    """The prediction log's directory: bytes on disk, segments, and the oldest unloaded one."""

    bytes: int
    segments: int
    unloaded: int
    oldest_unloaded_s: float | None  # age (by its name's start time) of the oldest unloaded
    free_percent: float  # free space on the directory's disk


def log_usage(settings: Settings, *, warehouse: bool = True) -> LogUsage:
    """Measure the prediction log's directory against the segments the warehouse loaded
    (``warehouse=False``: none loaded, for a warehouse not created yet)."""
    import time

    seg = _schema.segments
    loaded: dict[str, int] = {}
    if warehouse:
        with _engine.read(settings) as conn:
            loaded = {r.path: r.size for r in conn.execute(sa.select(seg.c.path, seg.c.size))}
    now_ns = time.time_ns()
    root = settings.predlog_path
    total = count = unloaded = 0
    oldest: int | None = None
    for path in segment_files(root):
        size = segment_size(path)
        if size is None:
            continue
        total += size
        count += 1
        if loaded.get(path.relative_to(root).as_posix()) == size:
            continue
        unloaded += 1
        started = _started_ns(path)
        if started is not None and (oldest is None or started < oldest):
            oldest = started
    usage = shutil.disk_usage(root)
    return LogUsage(
        bytes=total,
        segments=count,
        unloaded=unloaded,
        oldest_unloaded_s=None if oldest is None else max(0.0, (now_ns - oldest) / 1e9),
        free_percent=100.0 * usage.free / usage.total if usage.total else 0.0,
    )


def _started_ns(path: Path) -> int | None:
    """When a segment was opened: ``{worker_id}-{start_ts_ns}.jsonl[.open]``."""
    stem = path.name.removesuffix(".open").removesuffix(".jsonl")
    try:
        return int(stem.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        try:
            return path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
