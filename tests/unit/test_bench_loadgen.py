"""The bench's load generator against a tiny in-process HTTP server: what it counts.

Counts only; no timing is asserted (the bench is a benchmark, not a test).
"""

from __future__ import annotations

import asyncio

from bench.loadgen import closed_loop, open_loop
from bench.summary import Sample


async def _with_server(run: object, statuses: list[int]) -> tuple[Sample, int]:
    """Serve ``statuses`` in turn (then 200) on loopback while ``run(port)`` loads it."""
    seen = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                status = statuses[seen] if seen < len(statuses) else 200
                seen += 1
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\n{{}}".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sample = await run(port)  # type: ignore[operator]
    return sample, seen


def _body(i: int) -> bytes:
    return b'{"i": %d}' % i


def test_open_loop_sends_rate_times_duration_and_leaves_the_warm_up_unrecorded() -> None:
    async def run(port: int) -> Sample:
        return await open_loop(
            "127.0.0.1", port, "/predict", _body, rate=200, duration_s=0.5, warmup_s=0.25
        )

    sample, seen = asyncio.run(_with_server(run, [503] * 20))
    assert seen == 150  # 50 warm-up arrivals, then 100 recorded
    # the 503s went to warm-up arrivals: none recorded
    assert len(sample.latencies_s) == 100 and sample.errors == 0


def test_open_loop_counts_every_non_2xx_as_an_error() -> None:
    async def run(port: int) -> Sample:
        return await open_loop("127.0.0.1", port, "/predict", _body, rate=200, duration_s=0.5)

    sample, seen = asyncio.run(_with_server(run, [503] * 10 + [200] * 10 + [500] * 5))
    assert seen == 100
    assert sample.errors == 15 and len(sample.latencies_s) == 85
    assert sample.statuses == {503: 10, 200: 85, 500: 5}


def test_closed_loop_keeps_concurrency_connections_busy() -> None:
    async def run(port: int) -> Sample:
        return await closed_loop(
            "127.0.0.1", port, "/predict", _body, concurrency=4, duration_s=0.3
        )

    sample, seen = asyncio.run(_with_server(run, []))
    assert sample.errors == 0 and len(sample.latencies_s) == seen > 4
