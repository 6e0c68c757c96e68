"""HeadGuard in a real uvicorn server on loopback: heads bounded in size and time, bodies not.

The server runs in a thread with a small ASGI app that answers 200 with the
length of the body it read; the bounds are small (``MAX`` bytes, ``TIMEOUT_S``)
so each case is quick. The whole scoring service is tested the same way in
``tests/e2e/test_hardening_http.py``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from mlpipe.serving import free_port
from mlpipe.serving._header_guard import HeadGuard, Shed, _LingeringTransport

MAX = 1024
TIMEOUT_S = 0.5
SLOW_S = 0.4
SHED_BODY_WAIT_S = 1.0  # long beside the 0.05 s the test sends a body after its head


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["path"] == "/slow":  # a head, then the body a while later
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(SLOW_S)
        await send({"type": "http.response.body", "body": b"late"})
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(size).encode()
    head = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": body})


def _serve(max_bytes: int, timeout_s: float, shed: Any = None) -> Iterator[int]:
    port = free_port()
    protocol = HeadGuard.bounded(max_bytes, timeout_s, shed)
    protocol.shed_body_wait_s = SHED_BODY_WAIT_S
    config = uvicorn.Config(
        _app,
        host="127.0.0.1",
        port=port,
        http=protocol,
        lifespan="off",
        log_level="error",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    yield from _serve(MAX, TIMEOUT_S)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _until_closed(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def _get(size: int = 0) -> bytes:
    """A GET head of at least ``size`` bytes (its last header padded)."""
    start = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
    return start + b"a" * max(0, size - len(start) - 4) + b"\r\n\r\n"


def _post(body: bytes) -> bytes:
    return b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def test_a_head_up_to_the_bound_is_served_and_one_past_it_gets_431(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(_get(MAX))
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
    with _connect(port) as sock:
        sock.sendall(_get(MAX + 1))
        answer = _until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
    assert b"connection: close\r\n" in answer


def test_a_head_over_the_bound_in_small_pieces_is_refused_at_the_bound(port: int) -> None:
    with _connect(port) as sock:
        head = _get(10 * MAX)
        for i in range(0, MAX + 100, 100):
            sock.sendall(head[i : i + 100])
            time.sleep(0.005)
        answer = _until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer


def test_a_body_is_not_counted_as_head_in_one_read_or_after_a_split_end(port: int) -> None:
    body = b"x" * (200 * MAX)
    with _connect(port) as sock:
        sock.sendall(_post(body))  # head and body in one write
        assert _answer(sock) == b"%d" % len(body)
        request = _post(body)
        end = request.index(b"\r\n\r\n")
        for pieces in ([end + 2], [end + 1, end + 2, end + 3]):  # the head's end across reads
            for start, stop in zip([0, *pieces], [*pieces, len(request)], strict=True):
                sock.sendall(request[start:stop])
                time.sleep(0.02)
            assert _answer(sock) == b"%d" % len(body)


def _answer(sock: socket.socket) -> bytes:
    """The body of a 200 on ``sock``."""
    head, body = _response(sock)
    assert head.startswith(b"HTTP/1.1 200 "), head
    return body


def test_pipelined_requests_are_each_served(port: int) -> None:
    last = _get(MAX // 2).replace(b"Host:", b"Connection: close\r\nHost:")
    with _connect(port) as sock:
        sock.sendall(_get() + _post(b"abc") + last)
        answers = _until_closed(sock)
    assert answers.count(b"HTTP/1.1 200 ") == 3, answers
    assert [a.rsplit(b"\r\n\r\n")[-1] for a in answers.split(b"HTTP/1.1 ")[1:]] == [
        b"0",
        b"3",
        b"0",
    ]


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(port: int) -> None:
    with _connect(port) as sock:
        assert _until_closed(sock) == b""


def test_an_unfinished_or_trickled_head_gets_408_and_is_closed(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(_get()[:20])
        assert _until_closed(sock).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    with _connect(port) as sock:
        sent = 0
        with pytest.raises(OSError):  # closed while bytes keep coming, well before the end
            for byte in _get(MAX):
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.01)
        assert sent < MAX


def test_an_idle_keep_alive_connection_is_left_to_the_keep_alive_timeout(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(_get())
        assert _answer(sock) == b"0"
        time.sleep(TIMEOUT_S * 2)  # idle longer than a head may take; keep-alive is 5 s
        sock.sendall(_get())
        assert _answer(sock) == b"0"


def test_zero_lifts_a_bound() -> None:
    for port in _serve(0, TIMEOUT_S):
        with _connect(port) as sock:
            sock.sendall(_get(100 * MAX))
            assert _answer(sock) == b"0"
    for port in _serve(MAX, 0):
        with _connect(port) as sock:
            sock.sendall(_get()[:20])
            time.sleep(TIMEOUT_S * 2)
            sock.sendall(_get()[20:])
            assert _answer(sock) == b"0"


# -- an answer's head goes out with its body (decision 042) --


class _Socket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def write_eof(self) -> None:
        self.sent.append(b"<eof>")

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Cycle:
    more_body = False
    response_complete = False


class _Guard:
    def __init__(self, loop: asyncio.AbstractEventLoop, cycle: _Cycle | None) -> None:
        self.loop, self.cycle = loop, cycle


def _transport(cycle: _Cycle | None) -> tuple[_LingeringTransport, _Socket, Any]:
    loop = asyncio.new_event_loop()
    sock = _Socket()
    return _LingeringTransport(sock, _Guard(loop, cycle)), sock, loop  # type: ignore[arg-type]


def test_an_answers_head_and_body_are_one_send() -> None:
    transport, sock, loop = _transport(_Cycle())
    try:
        transport.write(b"HEAD")
        assert sock.sent == []
        transport.write(b"BODY")
        assert sock.sent == [b"HEADBODY"]
        loop.run_until_complete(asyncio.sleep(0))  # the loop's turn finds nothing held
        assert sock.sent == [b"HEADBODY"]
    finally:
        loop.close()


def test_a_head_with_no_body_yet_goes_out_on_the_loops_next_turn() -> None:
    transport, sock, loop = _transport(_Cycle())
    try:
        transport.write(b"HEAD")
        loop.run_until_complete(asyncio.sleep(0))
        assert sock.sent == [b"HEAD"]
    finally:
        loop.close()


def test_what_is_held_goes_out_before_a_close_or_an_eof() -> None:
    for finish, last in (("close", None), ("write_eof", b"<eof>")):
        transport, sock, loop = _transport(_Cycle())
        try:
            transport.write(b"HEAD")
            getattr(transport, finish)()
            assert sock.sent == [b"HEAD"] + ([last] if last else [])
        finally:
            loop.close()


def test_a_write_outside_an_answer_is_sent_at_once() -> None:
    done = _Cycle()
    done.response_complete = True
    for cycle in (None, done):
        transport, sock, loop = _transport(cycle)
        try:
            transport.write(b"HTTP/1.1 408 ...")
            assert sock.sent == [b"HTTP/1.1 408 ..."]
        finally:
            loop.close()


def test_a_head_is_not_held_back_until_a_late_body(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        began = time.monotonic()
        first = sock.recv(65536)
        took = time.monotonic() - began
        assert first.startswith(b"HTTP/1.1 200 ") and b"late" not in first, first
        assert took < SLOW_S / 2, took
        rest = b""
        while b"late" not in rest:
            rest += sock.recv(65536)


# Shedding: the protocol answers a POST to /shed from its head (as the front door's shed
# does while the worker is saturated); everything else reaches the app.
SHED = Shed(503, [(b"content-type", b"application/json"), (b"retry-after", b"1")], b'{"e":1}')
shed_paths: list[str] = []


def _shed(path: str) -> Shed | None:
    shed_paths.append(path)
    return SHED if path == "/shed" else None


@pytest.fixture(scope="module")
def shedding() -> Iterator[int]:
    yield from _serve(MAX, TIMEOUT_S, _shed)


def _shed_post(body: bytes, extra: bytes = b"") -> bytes:
    return _post(body).replace(b"POST / ", b"POST /shed ").replace(b"Host:", extra + b"Host:")


def _response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One whole response on ``sock``: its head and its body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    assert len(body) == length, (head, body)  # nothing of the next answer came with it
    return head, body


def test_a_shed_post_is_answered_from_its_head_and_the_connection_serves_on(
    shedding: int,
) -> None:
    with _connect(shedding) as sock:
        sock.sendall(_shed_post(b"x" * 300))
        head, body = _response(sock)
        assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), head
        assert b"content-type: application/json\r\nretry-after: 1\r\ncontent-length: 7" in head
        assert b"connection" not in head.lower() and body == b'{"e":1}'
        sock.sendall(_post(b"abcd"))  # its body was dropped: the next request is read as one
        assert _answer(sock) == b"4"


def test_only_a_post_is_shed_and_the_app_answers_the_rest(shedding: int) -> None:
    shed_paths.clear()
    with _connect(shedding) as sock:
        sock.sendall(_get().replace(b"GET / ", b"GET /shed "))
        assert _answer(sock) == b"0"  # the app's answer
        sock.sendall(_post(b"ab"))
        assert _answer(sock) == b"2"
    assert shed_paths == ["/"]  # asked for the POST only, and it said no


def _head_and_body(request: bytes) -> tuple[bytes, bytes]:
    end = request.index(b"\r\n\r\n") + 4
    return request[:end], request[end:]


def test_a_shed_post_whose_body_comes_soon_after_its_head_keeps_its_connection(
    shedding: int,
) -> None:
    head_only, rest = _head_and_body(_shed_post(b"y" * 1000))
    with _connect(shedding) as sock:
        sock.sendall(head_only)  # as many clients write them: the head, then the body
        time.sleep(0.05)
        sock.sendall(rest)
        head, body = _response(sock)
        assert head.startswith(b"HTTP/1.1 503 ") and b"connection" not in head.lower()
        sock.sendall(_post(b"abc"))
        assert _answer(sock) == b"3"
    assert body == b'{"e":1}'


def test_a_shed_post_whose_body_is_late_is_answered_after_a_wait_and_closed(
    shedding: int,
) -> None:
    head_only, rest = _head_and_body(_shed_post(b"y" * 1000))
    with _connect(shedding) as sock:
        sock.sendall(head_only)  # the head alone: the body comes later
        head, body = _response(sock)
        assert head.startswith(b"HTTP/1.1 503 ") and b"connection: close" in head
        sock.sendall(rest)  # read and dropped while the close lingers: no reset
        assert _until_closed(sock) == b""
    assert body == b'{"e":1}'


def test_pipelined_requests_around_a_shed_one_are_answered_in_order(shedding: int) -> None:
    last = _post(b"xyz").replace(b"Host:", b"Connection: close\r\nHost:")
    with _connect(shedding) as sock:
        sock.sendall(_post(b"a") + _shed_post(b"bb") + last)
        answers = _until_closed(sock)
    statuses = [a[:3] for a in answers.split(b"HTTP/1.1 ")[1:]]
    assert statuses == [b"200", b"503", b"200"], answers
    assert answers.endswith(b"3")


def test_a_client_that_asks_for_a_close_gets_its_shed_answer_and_the_close(
    shedding: int,
) -> None:
    with _connect(shedding) as sock:
        sock.sendall(_shed_post(b"z", extra=b"Connection: close\r\n"))
        answer = _until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 503 ") and b"connection: close\r\n" in answer
    assert answer.endswith(b'{"e":1}')
