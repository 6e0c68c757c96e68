"""The predict lane (decision 047) against a real server: the same answers as the app, on raw
connections as clients really write them.

One server (one worker) with ``serving.request_timeout_s`` at ``TIMEOUT_S``. A
``/predict`` with ``Content-Type: application/json`` is the lane's; the same
request with ``; charset=utf-8`` is the app's (the intake passes it, the lane
does not take it: ``tests/unit/serving/test_lane.py``), so every answer can be
compared between the two paths.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlpipe.serving import free_port
from tests.e2e.conftest import deploy_one

pytestmark = pytest.mark.e2e

TIMEOUT_S = 2.0
LANE = "application/json"
APP = "application/json; charset=utf-8"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fraud_v1: Path) -> Iterator[SimpleNamespace]:
    from mlpipe.config import load_settings
    from mlpipe.serving import ScoringProcess

    home = tmp_path_factory.mktemp("mlpipe-lane")
    settings = load_settings(home=home)
    deploy_one(settings, fraud_v1)
    port = free_port()
    server = ScoringProcess(
        settings,
        port=port,
        workers=1,
        log_path=home / "server.log",
        env={
            "MLPIPE_SERVING__REQUEST_TIMEOUT_S": str(TIMEOUT_S),
            "MLPIPE_SERVING__MAX_LATENCY_MS": "2000",  # as in conftest: a loaded CI machine
        },
    )
    with server:
        yield SimpleNamespace(settings=settings, url=server.url, port=port)


def _post(body: bytes, content_type: str = LANE) -> tuple[bytes, bytes]:
    """A ``/predict`` request's head and body."""
    head = (
        "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode(), body


def _good(rid: str, amount: float = 80.0) -> bytes:
    body = {"model": "fraud", "request_id": rid, "features": {"amount": amount, "n_items": 3}}
    return json.dumps(body).encode()


class _Reader:
    """Whole responses off one connection, in order (pipelined ones included)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.head_lines: list[bytes] = []  # the last response's, its date left out

    def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.head_lines = [line for line in lines if not line.lower().startswith(b"date:")]
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(headers.get(b"content-length", b"0"))
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        return int(lines[0].split()[1]), headers, rest[:length]

    def closed(self) -> bool:
        """Whether the server closes the connection (a reset counts) with nothing more."""
        try:
            return self._recv() == b""
        except ConnectionResetError:
            return True

    def _more(self) -> None:
        chunk = self._recv()
        if not chunk:
            raise ConnectionError(f"closed after {self.buffer!r}")
        self.buffer += chunk

    def _recv(self) -> bytes:
        return self.sock.recv(65536)


def _exchange(port: int, request: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    return _raw(port, request)[1:]


def _raw(port: int, request: bytes) -> tuple[list[bytes], int, dict[bytes, bytes], bytes]:
    """One request's answer: its head's lines as sent (the date left out), status,
    headers and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S + 10) as sock:
        sock.sendall(request)
        reader = _Reader(sock)
        status, headers, body = reader.response()
        return reader.head_lines, status, headers, body


def _series(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"model": "fraud", "features": {"amount": "x"}}', 422),
        (b'{"model": "nope", "features": {"amount": 1.0}}', 404),
        (b'{"model": "fraud", "request_id": "a\\u0000b", "features": {"amount": 1.0}}', 400),
    ],
)
def test_a_refusal_is_the_same_from_the_lane_and_the_app(
    served: Any, body: bytes, status: int
) -> None:
    lane = _raw(served.port, b"".join(_post(body, LANE)))
    app = _raw(served.port, b"".join(_post(body, APP)))
    assert lane[1] == app[1] == status
    assert lane[0] == app[0]  # the status line and every header, in order
    assert lane[3] == app[3]  # the body, byte for byte
    assert json.loads(lane[3])["status"] == status


def test_a_prediction_is_the_same_from_the_lane_and_the_app(served: Any) -> None:
    lines, status, headers, body = _raw(served.port, b"".join(_post(_good("lane-1", 81.5), LANE)))
    app = _raw(served.port, b"".join(_post(_good("app-1", 81.5), APP)))
    assert status == app[1] == 200

    def names(head: list[bytes]) -> list[bytes]:  # the lengths differ: ids, cache hits
        return [line.split(b":")[0] for line in head]

    assert names(lines) == names(app[0]) == [b"HTTP/1.1 200 OK", b"content-type", b"content-length"]
    assert int(headers[b"content-length"]) == len(body)
    ours, theirs = json.loads(body), json.loads(app[3])
    assert ours.pop("request_id") == "lane-1" and theirs.pop("request_id") == "app-1"
    ours.pop("cache_hit"), theirs.pop("cache_hit")  # the second is the cache's
    assert ours == theirs and ours["score"] is not None


def test_a_body_sent_after_its_head_is_answered_and_the_connection_kept(served: Any) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT_S + 10) as sock:
        reader = _Reader(sock)
        for i in range(3):  # as httpx writes: the head, then the body
            head, body = _post(_good(f"split-{i}"))
            sock.sendall(head)
            time.sleep(0.05)
            sock.sendall(body)
            status, _, answer = reader.response()
            assert status == 200 and json.loads(answer)["request_id"] == f"split-{i}"


def test_pipelined_requests_are_answered_in_order(served: Any) -> None:
    requests = [
        b"".join(_post(_good("pipe-1"))),
        b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"".join(_post(_good("pipe-2"))),
        b"".join(_post(b"{not json")),
        b"".join(_post(_good("pipe-3"))),
    ]
    with socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT_S + 10) as sock:
        sock.sendall(b"".join(requests))
        reader = _Reader(sock)
        answers = [reader.response() for _ in requests]
    assert [a[0] for a in answers] == [200, 200, 200, 400, 200]
    ids = [json.loads(answers[i][2])["request_id"] for i in (0, 2, 4)]
    assert ids == ["pipe-1", "pipe-2", "pipe-3"]


def test_a_body_not_all_come_in_time_gets_the_intakes_408_and_a_close(served: Any) -> None:
    before = _series(served.url, "mlpipe_rejected_requests_total", status="408")
    for content_type in (LANE, APP):
        head, body = _post(_good("late"), content_type)
        with socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT_S + 10) as sock:
            sock.sendall(head + body[:10])
            reader = _Reader(sock)
            started = time.monotonic()
            status, headers, answer = reader.response()
            waited = time.monotonic() - started
            assert status == 408 and headers[b"connection"] == b"close"
            message = f"request body not received within {TIMEOUT_S:g} s"
            assert json.loads(answer) == {"error": message, "status": 408}
            assert TIMEOUT_S - 0.5 < waited < TIMEOUT_S + 5
            assert reader.closed()
    after = _series(served.url, "mlpipe_rejected_requests_total", status="408")
    assert after - before == 2


def test_a_client_gone_before_its_body_leaves_nothing_in_progress(served: Any) -> None:
    head, body = _post(_good("gone"))
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head + body[:5])
        time.sleep(0.2)
    time.sleep(0.2)
    in_progress = "bentoml_service_request_in_progress"
    assert _series(served.url, in_progress, endpoint="/predict") == 0
    status, _, _ = _exchange(served.port, b"".join(_post(_good("after-gone"))))
    assert status == 200


def test_lane_answers_are_counted_and_logged_as_the_apps_are(served: Any) -> None:
    from tests.e2e.conftest import predlog_rows

    ns = "bentoml_service_request"
    ok = {"endpoint": "/predict", "http_response_code": "200"}
    before = _series(served.url, f"{ns}_total", **ok)
    latency = _series(served.url, "mlpipe_request_latency_seconds_count")
    for i in range(5):
        assert _exchange(served.port, b"".join(_post(_good(f"count-{i}", 90.0 + i))))[0] == 200
    assert _series(served.url, f"{ns}_total", **ok) - before == 5
    assert _series(served.url, "mlpipe_request_latency_seconds_count") - latency == 5
    logged = {row.request_id for row in predlog_rows(served.settings)}
    assert {f"count-{i}" for i in range(5)} <= logged


def test_the_lane_answers_without_bentomls_batcher_and_the_app_through_it(served: Any) -> None:
    """Which path answered shows in the batch counts: the pipeline counts every batch,
    BentoML's adaptive batcher only those it formed (the app's)."""
    bentoml_batches = "bentoml_service_adaptive_batch_size_count"
    pipeline_batches = "mlpipe_pipeline_batch_size_count"

    def counts() -> tuple[float, float]:
        return _series(served.url, bentoml_batches), _series(served.url, pipeline_batches)

    start = counts()
    for i in range(3):
        assert _exchange(served.port, b"".join(_post(_good(f"path-{i}"), LANE)))[0] == 200
    laned = counts()
    assert laned[0] == start[0] and laned[1] - start[1] == 3
    for i in range(3):
        assert _exchange(served.port, b"".join(_post(_good(f"path-app-{i}"), APP)))[0] == 200
    through_app = counts()
    assert through_app[0] - laned[0] == 3 and through_app[1] - laned[1] == 3
