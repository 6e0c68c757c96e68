"""Issue-23 hardening below the auth layer, against a real server: metric labels, request heads.

One server (one worker) with ``serving.header_timeout_s`` at ``HEAD_TIMEOUT_S``
and ``serving.max_header_bytes`` at its default.

- Item 1: BentoML's traffic metrics sit outside auth; requests to paths no
  route serves (whatever their status) share one ``endpoint="other"`` series,
  and ``/v2`` paths are labelled by their route template, never by a name the
  client chose, so ``/metrics`` does not grow with the number of paths probed.
- Item 4: a request head larger than ``max_header_bytes`` gets 431 and the
  connection is closed; a head still incomplete ``header_timeout_s`` after it
  began (sent slowly, or never sent) is closed (408 when part of it came), while
  an idle keep-alive connection between requests is left to the keep-alive timeout.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from mlpipe.serving import free_port
from tests.e2e.conftest import deploy_one

pytestmark = pytest.mark.e2e

HEAD_TIMEOUT_S = 1.5
MAX_HEAD = 64 * 1024  # the setting's default
GOOD = {"model": "fraud", "entity": {}, "features": {"amount": 80.0, "n_items": 3}}
ENDPOINT = re.compile(r'endpoint="([^"]*)"')


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fraud_v1: Path) -> Iterator[SimpleNamespace]:
    from mlpipe.config import load_settings
    from mlpipe.serving import ScoringProcess

    home = tmp_path_factory.mktemp("mlpipe-http")
    settings = load_settings(home=home)
    deploy_one(settings, fraud_v1)
    port = free_port()
    server = ScoringProcess(
        settings,
        port=port,
        workers=1,
        log_path=home / "server.log",
        env={
            "MLPIPE_SERVING__HEADER_TIMEOUT_S": str(HEAD_TIMEOUT_S),
            "MLPIPE_SERVING__MAX_LATENCY_MS": "2000",  # as in conftest: a loaded CI machine
        },
    )
    with server:
        yield SimpleNamespace(settings=settings, url=server.url, port=port)


# -- item 1: metric labels --


def _metrics(client: httpx.Client) -> str:
    r = client.get("/metrics")
    assert r.status_code == 200
    return r.text


def test_unknown_paths_share_one_metric_series(served: Any) -> None:
    probe = uuid.uuid4().hex[:8]
    with httpx.Client(base_url=served.url, timeout=30) as client:
        assert client.post("/predict", json=GOOD).status_code == 200
        assert client.get("/no-such-route").status_code < 500  # the "other" series exist
        before = _metrics(client)
        statuses = set()
        for i in range(300):
            statuses.add(client.get(f"/probe-{probe}-{i}").status_code)
        for i in range(50):  # mlpipe's own /v2 routes take a client-chosen model name
            statuses.add(client.get(f"/v2/models/probe-{probe}-{i}/ready").status_code)
            statuses.add(client.get(f"/v2/models/probe-{probe}-{i}/versions/{i}/x").status_code)
        after = _metrics(client)

    assert max(statuses) < 500, statuses
    assert probe not in after
    endpoints = set(ENDPOINT.findall(after))
    assert {"other", "/predict", "/v2/models/{name}/ready"} <= endpoints, endpoints
    assert all(e == "other" or e.startswith("/") and "probe" not in e for e in endpoints)
    # 400 new paths added a handful of series (the /v2 template's), not 400 paths' worth
    assert len(after) - len(before) < 32 * 1024, (len(before), len(after))


# -- item 4: request heads --


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT_S + 15)


def _response_then_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def _head(size: int) -> bytes:
    """A GET head of ``size`` bytes, its last header padded to fit."""
    start = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
    return start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"


def test_a_head_over_the_limit_gets_431_and_the_connection_closes(served: Any) -> None:
    with _connect(served.port) as sock:  # under the limit: served
        sock.sendall(_head(MAX_HEAD - 1024))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    with _connect(served.port) as sock:
        unfinished = _head(MAX_HEAD + 4096)[:-4]  # the head never ends
        for i in range(0, MAX_HEAD, 8192):  # in pieces: all read before the limit is passed
            sock.sendall(unfinished[i : i + 8192])
        time.sleep(0.2)
        sock.sendall(unfinished[MAX_HEAD:])
        answer = _response_then_close(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert httpx.get(f"{served.url}/livez", timeout=10).status_code == 200


def test_a_20_mb_header_is_refused_without_reading_it(served: Any) -> None:
    sent = 0
    with _connect(served.port) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        piece = b"a" * 65536
        try:
            while sent < 20 * 1024 * 1024:
                sock.sendall(piece)
                sent += len(piece)
            sock.sendall(b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed it while the header was still coming
        answer = _response_then_close(sock)
    assert not answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert sent < 20 * 1024 * 1024  # it never read the whole header
    assert httpx.get(f"{served.url}/livez", timeout=10).status_code == 200


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    sock.settimeout(seconds)
    try:
        return True, _response_then_close(sock)
    except TimeoutError:
        return False, b""


def test_a_connection_that_sends_nothing_is_closed(served: Any) -> None:
    with _connect(served.port) as sock:
        closed, answer = _closed_within(sock, HEAD_TIMEOUT_S + 10)
    assert closed and answer == b""


def test_an_unfinished_head_gets_408_and_is_closed(served: Any) -> None:
    with _connect(served.port) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed, answer = _closed_within(sock, HEAD_TIMEOUT_S + 10)
    assert closed and answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_a_trickled_head_is_closed_although_bytes_keep_coming(served: Any) -> None:
    stop = threading.Event()
    with _connect(served.port) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n")

        def drip() -> None:  # a header byte every 100 ms: the head never completes
            try:
                sock.sendall(b"X-Slow: ")
                while not stop.wait(0.1):
                    sock.sendall(b"a")
            except OSError:
                pass  # the server closed it: what this test wants

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:
            closed, answer = _closed_within(sock, HEAD_TIMEOUT_S + 10)
        finally:
            stop.set()
            dripper.join(5)
    assert closed and answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_an_idle_keep_alive_connection_is_not_timed_out_as_a_head(served: Any) -> None:
    request = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with _connect(served.port) as sock:
        sock.sendall(request)
        assert _response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(HEAD_TIMEOUT_S + 0.5)  # longer than a head may take, shorter than keep-alive
        sock.sendall(request)
        assert _response(sock).startswith(b"HTTP/1.1 200")


def _response(sock: socket.socket) -> bytes:
    """One whole response (head and content-length body): a short read must not leave
    the body's bytes to be taken for the start of the next response."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body
