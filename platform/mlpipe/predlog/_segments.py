"""Segment files: ``{worker_id}-{start_ts_ns}.jsonl.open`` while written, ``.jsonl`` when closed.

Each :meth:`SegmentWriter.append` is one ``os.write`` of whole lines to an
``O_APPEND`` descriptor, so once it returns the rows are in the OS and survive
the worker being killed. ``fsync`` runs on every append when
``fsync_interval_s`` is 0, else from a background thread on that interval
(what a power cut may take back). Segments roll by size and age; the loader
reads both closed and open segments and skips a half-written last line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from mlpipe.predlog._record import ENCODER, PredictionRecord

logger = logging.getLogger("mlpipe.predlog")

OPEN_SUFFIX = ".jsonl.open"
CLOSED_SUFFIX = ".jsonl"


class SegmentWriter:
    """One worker's append-only segment files (thread-safe)."""

    waits_for_acks = False  # an OS write: made on the event loop

    def __init__(
        self,
        directory: Path,
        worker_id: str,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        max_age_s: float = 300.0,
        fsync_interval_s: float = 0.2,
    ) -> None:
        self.directory = Path(directory)
        self.worker_id = worker_id
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.fsync_interval_s = fsync_interval_s
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._path: Path | None = None
        self._opened_at = 0.0
        self._size = 0
        self._dirty = False
        self._closed = False
        self._stop = threading.Event()
        tick = min(fsync_interval_s or 1.0, max_age_s, 1.0)
        self._thread = threading.Thread(
            target=self._background, args=(tick,), name="predlog-fsync", daemon=True
        )
        self._thread.start()

    @property
    def current_path(self) -> Path | None:
        """The open segment, if any."""
        return self._path

    def append(self, records: Sequence[PredictionRecord]) -> None:
        """Write the rows as whole lines in one ``os.write`` (and fsync if the interval is 0)."""
        if not records:
            return
        buf = ENCODER.encode_lines(records)  # one buffer, a line a record
        with self._lock:
            if self._closed:
                raise RuntimeError("prediction log is closed")
            if self._fd is not None and (
                self._size + len(buf) > self.max_bytes
                or time.monotonic() - self._opened_at >= self.max_age_s
            ):
                self._roll()
            if self._fd is None:
                self._open()
            assert self._fd is not None
            try:
                _write_all(self._fd, buf)
            except OSError:
                self._undo_partial_write()
                raise
            self._size += len(buf)
            if self.fsync_interval_s == 0:
                os.fsync(self._fd)
            else:
                self._dirty = True

    def flush(self) -> None:
        """fsync the open segment now."""
        with self._lock:
            self._sync()

    def roll(self) -> None:
        """Close the open segment (renamed to ``.jsonl``); the next append opens a new one."""
        with self._lock:
            self._roll()

    def close(self) -> None:
        """fsync and close the open segment and stop the background thread."""
        self._stop.set()
        with self._lock:
            self._roll()
            self._closed = True
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _open(self) -> None:
        name = f"{self.worker_id}-{time.time_ns()}{OPEN_SUFFIX}"
        self._path = self.directory / name
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._opened_at = time.monotonic()
        self._size = 0

    def _sync(self) -> None:
        if self._fd is not None and self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def _sync_beside_appends(self) -> None:
        """fsync what is written so far without holding the lock, so appends go on meanwhile.

        An fsync usually takes ~1 ms but now and then far longer (decision
        004); under the lock, every batch's append, and with it the worker's
        answers, would wait that long. A duplicate of the descriptor is synced,
        so a roll meanwhile cannot close it underneath; a roll fsyncs on its
        own, so a closed segment is whole on disk when it is renamed. Rows
        appended during the fsync are left dirty for the next tick.
        """
        with self._lock:
            if self._closed or self._fd is None or not self._dirty:
                return
            fd = os.dup(self._fd)
            self._dirty = False
        try:
            os.fsync(fd)
        except OSError:
            with self._lock:
                self._dirty = True
            raise
        finally:
            os.close(fd)

    def _roll(self) -> None:
        if self._fd is None or self._path is None:
            return
        self._dirty = True
        self._sync()
        os.close(self._fd)
        closed = self._path.with_name(self._path.name.removesuffix(OPEN_SUFFIX) + CLOSED_SUFFIX)
        os.replace(self._path, closed)
        self._fd, self._path = None, None

    def _undo_partial_write(self) -> None:
        """Cut a half-written append (ENOSPC mid-write) so the segment ends on a whole line."""
        try:
            os.ftruncate(self._fd, self._size)  # type: ignore[arg-type]
        except OSError:
            logger.exception("prediction log: cannot truncate %s after a failed write", self._path)

    def _background(self, tick: float) -> None:
        while not self._stop.wait(tick):
            try:
                self._sync_beside_appends()
                with self._lock:
                    if self._closed:
                        return
                    age = time.monotonic() - self._opened_at
                    if self._fd is not None and age >= self.max_age_s:
                        self._roll()
            except OSError:
                logger.exception("prediction log: background fsync/roll failed")


def _write_all(fd: int, buf: bytes) -> None:
    view = memoryview(buf)
    while view:
        written = os.write(fd, view)
        view = view[written:]
