"""Admission control for scoring requests: fast 503s, and a bounded number in flight per worker.

Two pieces, because refusing has to be cheap. Above saturation a refusal that
went through BentoML's middleware (metrics, a tracing span per request and per
send, the deadline) and mlpipe's (keys, intake) cost about half as much CPU as
a served request, so the refusals themselves took the CPU the admitted
requests needed: goodput collapsed to ~30 % of capacity (bench/README.md,
"Shedding before the stack").

- :class:`FrontDoor` wraps the whole app, before anything else runs, and
  refuses a scoring request (``/predict``, ``/v2/models/…/infer``) while the
  worker is saturated or its models are still loading. It holds no slot.
- :class:`OverloadGate` sits after the intake, so a client still sending its
  body holds nothing; it counts the requests in flight and refuses the few
  that pass the front door in the same instant as the last free slot is taken.

A refusal is 503 with a JSON body and ``Retry-After``. While the worker is
still loading (say it just restarted after a crash) it also says
``Connection: close``, so the client reconnects and may land on a worker that
is ready. An overloaded worker keeps the connection: a reconnect per refusal
cost both sides more CPU just when there was none to spare (above saturation,
accepted p99 ~0.9 s with it, ~0.15 s without; bench/README.md).

Workers share one listening socket, and the one that wakes first accepts a
whole burst of new connections, so keep-alive clients can all end up on one
worker. Every ``reconnect_every``-th answer therefore says ``Connection:
close``: the client reconnects, and whichever worker is free to accept takes
it. ``/readyz`` reports not ready while the worker is saturated
(:func:`saturated`).

The bound is per worker but held over the whole server: with
:func:`share_with_workers` each worker publishes its count in a slot of a small
file its siblings map (:class:`InflightBoard`), and a request is refused when
the server as a whole holds ``max_inflight`` × workers. Connections do not
spread evenly over workers (see above), so a per-worker check either refused
a busy worker's requests while the other idled (a low bound: 503s at 32
connections) or let every worker fill up (a high one: by Little's law, the
bound divided by the throughput is the queue the admitted requests wait in).
Pooled, the bound can be low enough for the admitted requests' tail above
saturation without refusing anything at 32 connections (bench/README.md,
"One bound for the server").
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path

from mlpipe.serving import runtime as _runtime
from mlpipe.serving.asgi import ASGIApp, Message, Receive, Scope, Send, send_json
from mlpipe.serving.oip_schema import PREFIX as _OIP

_state = {"inflight": 0, "limit": 0}


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


_board: list[InflightBoard] = []  # this worker's board, once share_with_workers is called


def share_with_workers(board: InflightBoard) -> None:
    """Hold the bound over the server: saturated when all workers together hold theirs."""
    _board[:] = [board]
    board.publish(_state["inflight"])


def saturated() -> bool:
    """True while the server (or, unshared, this worker) holds as many requests as it admits."""
    limit = _state["limit"]
    if limit <= 0:
        return False
    if _board:
        board = _board[0]
        return board.total() >= limit * board.workers
    return _state["inflight"] >= limit


def _count(delta: int) -> None:
    _state["inflight"] += delta
    if _board:
        _board[0].publish(_state["inflight"])


def _is_scoring(scope: Scope) -> bool:
    """An HTTP request for a prediction: ``/predict`` or an Open Inference Protocol infer."""
    if scope["type"] != "http":
        return False
    path = scope["path"]
    return path == "/predict" or (path.startswith(_OIP + "/models/") and path.endswith("/infer"))


class FrontDoor:
    """Refuse scoring requests at once while not ready or saturated; pass everything else."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        retry_after_s: int = 1,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        self.retry_after = str(retry_after_s).encode()
        self._ready = ready or _runtime_ready

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _is_scoring(scope):
            if not self._ready():
                await _refuse(send, self.retry_after, "not ready: models still loading", close=True)
                return
            if saturated():
                await _refuse(send, self.retry_after, _overloaded())
                return
        await self.app(scope, receive, send)


class OverloadGate:
    """Count ``path`` requests in flight; 503 + ``Retry-After`` beyond ``max_inflight``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_inflight: int,
        retry_after_s: int = 1,
        reconnect_every: int = 0,
        path: str = "/predict",
    ) -> None:
        self.app = app
        self.retry_after = str(retry_after_s).encode()
        self.reconnect_every = reconnect_every
        self.path = path
        self._admitted = 0
        _state["limit"] = max_inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        if saturated():
            await _refuse(send, self.retry_after, _overloaded())
            return
        self._admitted += 1
        if self.reconnect_every and self._admitted % self.reconnect_every == 0:
            send = _closing(send)
        _count(1)
        try:
            await self.app(scope, receive, send)
        finally:
            _count(-1)


async def _refuse(send: Send, retry_after: bytes, message: str, *, close: bool = False) -> None:
    """503 with ``message``, ``Retry-After`` and, if ``close``, ``Connection: close``; counted."""
    rt = _runtime.current()
    if rt is not None:
        rt.metrics.rejected.labels("503").inc()
    headers = [(b"retry-after", retry_after), *([_CLOSE] if close else [])]
    await send_json(send, 503, {"error": message, "status": 503}, headers)


def _overloaded() -> str:
    per = " per worker" if _board else ""
    return f"overloaded: {_state['limit']} requests in flight{per}"


_CLOSE = (b"connection", b"close")


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` added to the response head."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await send(message)

    return closing


def _runtime_ready() -> bool:
    rt = _runtime.current()
    return rt is not None and rt.ready


__all__ = ["FrontDoor", "InflightBoard", "OverloadGate", "saturated", "share_with_workers"]
