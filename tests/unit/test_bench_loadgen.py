"""The bench's load generator (``bench/loadgen.c``) against a tiny HTTP server: what it counts.

Counts only; no timing is asserted (the bench is a benchmark, not a test).
The server runs on an asyncio loop in a thread of the test process; the
generator is a subprocess, built from its C source on first use.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bench.loadgen import closed_loop, open_loop


class _Server:
    """Answers the i-th request with ``statuses[i]`` (then 200); keeps the bodies it got."""

    def __init__(self, statuses: list[int], chunked: bool = False) -> None:
        self.statuses, self.chunked = statuses, chunked
        self.bodies: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                self.bodies.append(await reader.readexactly(length))
                seen = len(self.bodies) - 1
                status = self.statuses[seen] if seen < len(self.statuses) else 200
                if self.chunked:
                    answer = b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
                else:
                    answer = b"Content-Length: 2\r\n\r\n{}"
                writer.write(b"HTTP/1.1 %d X\r\n" % status + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@contextmanager
def _serving(server: _Server) -> Iterator[int]:
    loop = asyncio.new_event_loop()
    started = loop.run_until_complete(asyncio.start_server(server.handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield started.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        started.close()
        loop.close()


def _body(i: int) -> bytes:
    return b'{"i": %d}' % i


def test_open_loop_sends_rate_times_duration_and_leaves_the_warm_up_unrecorded() -> None:
    server = _Server([503] * 20)
    with _serving(server) as port:
        sample = open_loop(
            "127.0.0.1", port, "/predict", _body, rate=200, duration_s=0.5, warmup_s=0.25
        )
    assert len(server.bodies) == 150  # 50 warm-up arrivals, then 100 recorded
    assert sorted(server.bodies) == sorted(_body(i) for i in range(150))
    # the 503s went to warm-up arrivals: none recorded
    assert len(sample.latencies_s) == 100 and sample.errors == 0


@pytest.mark.parametrize("chunked", [False, True])
def test_open_loop_counts_every_non_2xx_as_an_error(chunked: bool) -> None:
    server = _Server([503] * 10 + [200] * 10 + [500] * 5, chunked=chunked)
    with _serving(server) as port:
        sample = open_loop("127.0.0.1", port, "/predict", _body, rate=200, duration_s=0.5)
    assert len(server.bodies) == 100
    assert sample.errors == 15 and len(sample.latencies_s) == 85
    assert sample.statuses == {503: 10, 200: 85, 500: 5}
    assert sample.error_latencies_s is not None and len(sample.error_latencies_s) == 15


def test_closed_loop_keeps_concurrency_connections_busy() -> None:
    server = _Server([])
    with _serving(server) as port:
        sample = closed_loop("127.0.0.1", port, "/predict", _body, concurrency=4, duration_s=0.3)
    assert sample.errors == 0 and len(sample.latencies_s) == len(server.bodies) > 4
    assert server.connections == 4
    assert sorted(server.bodies) == sorted(_body(i) for i in range(len(server.bodies)))


def test_a_server_that_is_not_there_is_errors_not_a_hang() -> None:
    with _serving(_Server([])) as port:
        pass  # the port is free again: nothing listens on it
    sample = open_loop("127.0.0.1", port, "/predict", _body, rate=100, duration_s=0.2)
    assert sample.latencies_s == [] and sample.errors == 20
    assert sample.statuses == {0: 20}
