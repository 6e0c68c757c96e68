"""Admission state: the scoring requests a worker holds, and how many it admits.

One :class:`Admission` per worker, shared by the parts that decide on it: the
front door and the overload gate refuse above it, ``/readyz`` reports not
ready while it is saturated (:mod:`mlpipe.serving._overload`).

The bound is per worker but held over the whole server: with
:meth:`Admission.share_with_workers` each worker publishes its count in a slot
of a small file its siblings map (:class:`InflightBoard`), and a request is
refused when the server as a whole holds ``max_inflight`` × workers.
Connections do not spread evenly over workers (one that wakes first accepts a
whole burst), so a per-worker check either refused a busy worker's requests
while the other idled (a low bound) or let every worker fill up (a high one:
by Little's law, the bound divided by the throughput is the queue the admitted
requests wait in). Pooled, the bound can be low enough for the admitted
requests' tail above saturation without refusing anything at 32 connections
(decision 010).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from mlpipe.serving._error_bodies import Overloaded


class InflightBoard:
    """The scoring requests in flight of one server's workers: a slot each in a shared file.

    Slot 0 holds the pid of the server process that started the workers; a
    worker that finds another there (a file left by an earlier server on the
    same address) clears the file. Each worker writes only its own slot, so no
    lock is needed; a read of the others may be a moment old, which an
    admission bound tolerates. The file's directory holds boards only: opening
    one removes those whose server has exited, so servers started on a new
    port each time leave no trail of files.
    """

    def __init__(self, path: Path, *, workers: int, worker: int, server_pid: int) -> None:
        if not 1 <= worker <= workers:
            raise ValueError(f"worker {worker} is not one of 1..{workers}")
        size = 8 * (workers + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_boards_of_exited_servers(path.parent, keep=path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        if struct.unpack_from("q", self._map)[0] != server_pid:
            self._map[:] = bytes(size)
            struct.pack_into("q", self._map, 0, server_pid)
        self.workers = workers
        self._slot = 8 * worker
        self._slots = struct.Struct(f"{workers}q")

    def publish(self, inflight: int) -> None:
        """Record this worker's count."""
        struct.pack_into("q", self._map, self._slot, inflight)

    def total(self) -> int:
        """The count over all the server's workers."""
        return sum(self._slots.unpack_from(self._map, 8))


class ReadyBoard(InflightBoard):
    """Which of one server's workers have loaded their models: a slot each in a shared file.

    Workers share one listening socket, so ``/readyz`` is answered by whichever
    worker takes the connection; a worker answers 200 only once every worker
    has marked itself loaded here, so the port's answer holds for all of them
    (issue 29, item 10). A worker's slot is cleared when it opens the board, so
    a worker that replaces a crashed one (same slot) is loading until it says so.
    """

    def __init__(self, path: Path, *, workers: int, worker: int, server_pid: int) -> None:
        super().__init__(path, workers=workers, worker=worker, server_pid=server_pid)
        self.publish(0)

    def mark_loaded(self) -> None:
        """This worker has loaded (or refused) every deployed model."""
        self.publish(1)

    def loading(self) -> int:
        """How many of the server's workers have not marked themselves loaded."""
        return self.workers - self.total()


def _remove_boards_of_exited_servers(directory: Path, *, keep: Path) -> None:
    for other in directory.iterdir():
        if other == keep:
            continue
        try:
            server_pid = struct.unpack_from("q", other.read_bytes())[0]
        except (OSError, struct.error):  # gone meanwhile, or not yet sized
            continue
        if server_pid > 0 and not _alive(server_pid):
            other.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class Admission:
    """This worker's scoring requests in flight against ``max_inflight`` (0: no bound).

    Alone it bounds the worker; after :meth:`share_with_workers` it bounds the
    server: saturated when all workers together hold ``max_inflight`` each.
    """

    def __init__(self, max_inflight: int) -> None:
        self.limit = max_inflight
        self.inflight = 0
        self._board: InflightBoard | None = None

    def share_with_workers(self, board: InflightBoard) -> None:
        """Hold the bound over the server: saturated when all workers together hold theirs."""
        self._board = board
        board.publish(self.inflight)

    def saturated(self) -> bool:
        """True while the server (or, unshared, this worker) holds as many requests as it admits."""
        if self.limit <= 0:
            return False
        board = self._board
        if board is not None:
            return board.total() >= self.limit * board.workers
        return self.inflight >= self.limit

    def hold(self) -> None:
        """One more request in flight (published to the board when shared)."""
        self._count(1)

    def release(self) -> None:
        """One request fewer in flight."""
        self._count(-1)

    def _count(self, delta: int) -> None:
        self.inflight += delta
        if self._board is not None:
            self._board.publish(self.inflight)

    def refusal(self) -> Overloaded | None:
        """The error a scoring request is refused with while saturated (503), else None.

        The one saturation check: the front door, the overload gate and ``/readyz`` ask it.
        """
        return Overloaded(self.overloaded()) if self.saturated() else None

    def overloaded(self) -> str:
        """The refusal's message while saturated."""
        per = " per worker" if self._board is not None else ""
        return f"overloaded: {self.limit} requests in flight{per}"


__all__ = ["Admission", "InflightBoard", "ReadyBoard"]
