"""Issue-6 hardening against a real server: no unsafe deserialization, no slow-client hold.

One server (one worker) with ``serving.request_timeout_s`` at ``TIMEOUT_S``.
A pickle whose unpickling would create a marker file is posted as
``application/vnd.bentoml+pickle`` to ``/predict``, to the Open Inference
Protocol and to paths only BentoML would route: every one gets 415 with a JSON
error body, the marker never appears, and no prediction-log row is written.
Clients that send headers and then stall (or trickle) their body get 408 with
``Connection: close`` within the timeout, while other requests are answered.
"""

from __future__ import annotations

import pathlib
import pickle
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from mlpipe.serving import free_port
from tests.e2e.conftest import deploy_one, predlog_rows

pytestmark = pytest.mark.e2e

TIMEOUT_S = 2.0
PICKLE = "application/vnd.bentoml+pickle"
GOOD = {"model": "fraud", "entity": {}, "features": {"amount": 80.0, "n_items": 3}}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fraud_v1: Path) -> Iterator[SimpleNamespace]:
    from mlpipe.config import load_settings
    from mlpipe.serving import ScoringProcess

    home = tmp_path_factory.mktemp("mlpipe-hard")
    settings = load_settings(home=home)
    version = deploy_one(settings, fraud_v1)
    port = free_port()
    server = ScoringProcess(
        settings,
        port=port,
        workers=1,
        log_path=home / "server.log",
        env={
            "MLPIPE_SERVING__REQUEST_TIMEOUT_S": str(TIMEOUT_S),
            "MLPIPE_SERVING__MAX_LATENCY_MS": "2000",  # as in conftest: a loaded CI machine
            "MLPIPE_PREDLOG__FSYNC_INTERVAL_S": "0.1",
        },
    )
    with server:
        yield SimpleNamespace(
            settings=settings, url=server.url, port=port, home=home, version=version
        )


class _TouchOnLoad:
    """Unpickling this creates ``marker``: what a pickle-accepting endpoint would run."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.Path.touch, (self.marker,))


def _logged_after(served: Any, before: int, request_id: str) -> list[str]:
    """Request ids logged since ``before`` rows, once a good request (a barrier) is answered."""
    r = httpx.post(f"{served.url}/predict", json={**GOOD, "request_id": request_id}, timeout=30)
    assert r.status_code == 200, r.text
    return [row.request_id for row in predlog_rows(served.settings)[before:]]


def _assert_refused(r: httpx.Response, status: int, words: str) -> None:
    assert r.status_code == status, (r.request.method, r.request.url, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["status"] == status and words in body["error"], body


def test_a_pickle_body_is_refused_everywhere_and_never_unpickled(
    served: Any, tmp_path: pathlib.Path
) -> None:
    control = tmp_path / "control.marker"
    pickle.loads(pickle.dumps(_TouchOnLoad(control)))  # the payload is live: unpickled, it runs
    assert control.exists()
    marker = tmp_path / "pickle-ran.marker"
    payload = pickle.dumps(_TouchOnLoad(marker))
    before = len(predlog_rows(served.settings))

    targets = [
        ("POST", "/predict"),
        ("POST", "/v2/models/fraud/infer"),
        ("POST", f"/v2/models/fraud/versions/{served.version}/infer"),
        ("POST", "/predict/"),
        ("POST", "/"),
        ("POST", "/livez"),  # an open path: no key needed, still no pickle
        ("POST", "/readyz"),
        ("POST", "/docs.json"),
        ("POST", "/no-such-route"),
        ("PUT", "/predict"),
        ("PATCH", "/predict"),
    ]
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for method, path in targets:
            r = client.request(method, path, content=payload, headers={"content-type": PICKLE})
            _assert_refused(r, 415, "unsupported content type")
            assert PICKLE in r.json()["error"]
        # a JSON Content-Type first does not smuggle a pickle one in second
        two = [("content-type", "application/json"), ("content-type", PICKLE)]
        _assert_refused(client.post("/predict", content=payload, headers=two), 415, "content")
        # neither does an octet-stream body outside Triton's binary tensor extension
        octet = {"content-type": "application/octet-stream"}
        _assert_refused(client.post("/predict", content=payload, headers=octet), 415, "content")
        r = client.post(
            "/v2/models/fraud/infer",
            content=payload,
            headers={**octet, "inference-header-content-length": str(len(payload))},
        )
        assert r.status_code == 400, r.text  # decoded as the protocol's JSON, refused as such

    assert not marker.exists()
    assert _logged_after(served, before, "after-pickles") == ["after-pickles"]


def test_json_content_types_are_accepted(served: Any) -> None:
    import json

    body = json.dumps(GOOD).encode()
    for content_type in (None, "application/json", "application/json; charset=utf-8"):
        headers = {"content-type": content_type} if content_type else {}
        r = httpx.post(f"{served.url}/predict", content=body, headers=headers, timeout=30)
        assert r.status_code == 200, (content_type, r.text)
    r = httpx.post(
        f"{served.url}/predict",
        content=body,
        headers={"content-type": "application/merge-patch+json"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def _stalled(port: int, declared: int = 200, sent: bytes = b'{"model": "fr') -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S + 15)
    head = (
        f"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {declared}\r\n\r\n"
    ).encode()
    sock.sendall(head + sent)
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one HTTP/1.1 response read off the socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the body"
        body += chunk
    return status, headers, body


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_stalled_body_gets_408_in_time_and_blocks_nobody(served: Any) -> None:
    import json

    before = len(predlog_rows(served.settings))
    started = time.monotonic()
    stalled = [_stalled(served.port) for _ in range(16)]
    trickle = _stalled(served.port, sent=b"")
    stop = threading.Event()

    def drip() -> None:  # one byte every 100 ms: each read is quick, the body never completes
        try:
            while not stop.wait(0.1):
                trickle.sendall(b" ")
        except OSError:
            pass  # the server closed it: what this test wants

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            for i in range(5):  # answered normally while the slow clients hold their sockets
                t = time.monotonic()
                r = client.post("/predict", json={**GOOD, "request_id": f"beside-slow-{i}"})
                assert r.status_code == 200, r.text
                assert time.monotonic() - t < TIMEOUT_S
        for sock in [*stalled, trickle]:
            status, headers, body = _read_response(sock)
            elapsed = time.monotonic() - started
            assert status == 408, body
            assert headers.get("connection", "").lower() == "close"
            error = json.loads(body)
            assert error["status"] == 408 and "not received within" in error["error"]
            assert _closed_by_server(sock), "the server must close the connection after a 408"
            assert elapsed < TIMEOUT_S + 5, elapsed
        assert time.monotonic() - started >= TIMEOUT_S * 0.9  # not refused before the deadline
    finally:
        stop.set()
        dripper.join(timeout=5)
        for sock in [*stalled, trickle]:
            sock.close()

    logged = _logged_after(served, before, "after-slow")
    assert logged == [f"beside-slow-{i}" for i in range(5)] + ["after-slow"]


def test_a_body_that_arrives_in_time_is_answered(served: Any) -> None:
    import json

    body = json.dumps({**GOOD, "request_id": "slow-but-in-time"}).encode()
    sock = _stalled(served.port, declared=len(body), sent=body[:10])
    try:
        time.sleep(TIMEOUT_S / 4)
        sock.sendall(body[10:])
        status, _, answer = _read_response(sock)
    finally:
        sock.close()
    assert status == 200, answer
    assert json.loads(answer)["request_id"] == "slow-but-in-time"
