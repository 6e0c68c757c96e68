"""A small asyncio HTTP/1.1 load generator for loopback: closed loop and open loop.

Why not wrk: wrk is closed-loop only (its latency tails hide coordinated
omission) and wrk2 is not in Debian. A raw-socket asyncio client on uvloop
costs ~20-40 µs of CPU a request here, records every request's latency
exactly, and drives a fixed arrival rate where latency is measured from the
*scheduled* send time, so a stalled server shows in p99 instead of slowing
the generator down. Every loop is bounded by a deadline and a per-request
timeout; nothing runs past ``duration_s + timeout_s``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections import Counter
from collections.abc import Callable

from bench.summary import Sample

BodyFactory = Callable[[int], bytes]

try:  # uvloop roughly halves the client's own CPU per request
    import uvloop as _uvloop
except ImportError:  # pragma: no cover
    _uvloop = None


class _Conn:
    """One keep-alive connection."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port = host, port
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(self.head + str(len(body)).encode() + b"\r\n\r\n" + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = -1
        chunked = close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                close = True
        if chunked:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        elif length >= 0:
            await self.reader.readexactly(length)
        else:
            await self.reader.read()
            close = True
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class _Recorder:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.error_latencies: list[float] = []  # non-2xx answers: how fast a 503 came back
        self.errors = 0
        self.statuses: Counter[int] = Counter()

    def sample(self, elapsed: float) -> Sample:
        return Sample(
            self.latencies, self.errors, elapsed, dict(self.statuses), self.error_latencies
        )


async def _one(conn: _Conn, body: bytes, t0: float, timeout_s: float, rec: _Recorder) -> None:
    try:
        status = await asyncio.wait_for(conn.request(body), timeout_s)
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
        conn.close()
        rec.errors += 1
        rec.statuses[0] += 1
        return
    rec.statuses[status] += 1
    if 200 <= status < 300:
        rec.latencies.append(time.perf_counter() - t0)
    else:
        rec.error_latencies.append(time.perf_counter() - t0)
        rec.errors += 1


async def closed_loop(
    host: str,
    port: int,
    path: str,
    bodies: BodyFactory,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.0,
    timeout_s: float = 10.0,
) -> Sample:
    """``concurrency`` connections, each sending its next request when the last one is answered.

    Requests answered during ``warmup_s`` are not recorded.
    """
    counter = itertools.count()
    start = time.perf_counter()
    measure_from = start + warmup_s
    deadline = measure_from + duration_s
    rec, warm = _Recorder(), _Recorder()

    async def worker() -> None:
        conn = _Conn(host, port, path)
        try:
            while (t0 := time.perf_counter()) < deadline:
                target = rec if t0 >= measure_from else warm
                await _one(conn, bodies(next(counter)), t0, timeout_s, target)
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return rec.sample(deadline - measure_from)


async def open_loop(
    host: str,
    port: int,
    path: str,
    bodies: BodyFactory,
    *,
    rate: float,
    duration_s: float,
    warmup_s: float = 0.0,
    max_connections: int = 512,
    timeout_s: float = 5.0,
) -> Sample:
    """Requests arriving at a fixed ``rate`` per second for ``duration_s``, whatever the answers.

    Each arrival takes an idle connection (opening one, up to ``max_connections``);
    latency runs from the scheduled arrival time, so waiting for a connection
    counts. Arrivals in the first ``warmup_s`` (same rate) are not recorded: they
    open the connections and meet the server's reaction to the step in load.
    After the last arrival, the answers still in flight get ``timeout_s``.
    """
    rec, warm = _Recorder(), _Recorder()
    idle: list[_Conn] = []
    opened = 0
    free = asyncio.Condition()
    tasks: set[asyncio.Task[None]] = set()

    async def arrival(i: int, t_sched: float, rec: _Recorder) -> None:
        nonlocal opened
        async with free:
            while not idle and opened >= max_connections:
                await free.wait()
            if idle:
                conn = idle.pop()
            else:
                opened += 1
                conn = _Conn(host, port, path)
        try:
            await _one(conn, bodies(i), t_sched, timeout_s, rec)
        finally:
            async with free:
                idle.append(conn)
                free.notify()

    interval = 1.0 / rate
    skipped = int(rate * warmup_s)
    total = skipped + int(rate * duration_s)
    start = time.perf_counter()
    for i in range(total):
        t_sched = start + i * interval
        delay = t_sched - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.ensure_future(arrival(i, t_sched, rec if i >= skipped else warm))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=timeout_s + 1.0)
    for task in list(tasks):
        task.cancel()
    unanswered = total - skipped - len(rec.latencies) - rec.errors
    if unanswered:  # still waiting after the grace period: a timeout
        rec.errors += unanswered
        rec.statuses[0] += unanswered
    for conn in idle:
        conn.close()
    return rec.sample(duration_s)


def run(coro_factory: Callable[[], object]) -> Sample:
    """Run one load coroutine on a fresh (uv)loop, with the cycle collector paused.

    A load run allocates fast and keeps every latency; the generator's own GC
    pauses (a full collection scans the whole heap) stalled every connection at
    once and showed up as server latency. Paused, the generator drove the same
    mlpipe server at ~1.6 x the rate (bench/README.md, "GC stalls").
    """
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        if _uvloop is not None:
            return _uvloop.run(coro_factory())  # type: ignore[arg-type]
        return asyncio.run(coro_factory())  # type: ignore[arg-type]
    finally:
        gc.enable()
        gc.unfreeze()


__all__ = ["BodyFactory", "closed_loop", "open_loop", "run"]
