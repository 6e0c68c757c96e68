"""Admission control: the front door's fast 503s and the gate's bound on requests in flight."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, Counter

from mlpipe.serving import (
    Admission,
    FrontDoor,
    InflightBoard,
    OverloadGate,
    ReadinessGate,
    RuntimeSlot,
)


def _scope(path: str = "/predict") -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "POST", "headers": []}


async def _noop_receive() -> Any:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _must_not_run(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    raise AssertionError("must not be called")


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x", b"1")]})
    await send({"type": "http.response.body", "body": b"{}"})


def _answer(app: Any, path: str = "/predict") -> tuple[int, dict[bytes, bytes], dict[str, Any]]:
    sent: list[Any] = []

    async def send(m: Any) -> None:
        sent.append(m)

    asyncio.run(app(_scope(path), _noop_receive, send))
    body = json.loads(sent[1]["body"]) if sent[1]["body"] != b"{}" else {}
    return sent[0]["status"], dict(sent[0]["headers"]), body


@pytest.mark.parametrize("path", ["/predict", "/v2/models/fraud/infer"])
def test_the_readiness_gate_refuses_scoring_while_not_ready_and_asks_for_a_reconnect(
    path: str,
) -> None:
    status, headers, body = _answer(
        ReadinessGate(_must_not_run, retry_after_s=3, ready=lambda: False), path
    )
    assert status == 503 and body["status"] == 503
    assert body["error"] == "not ready: models still loading"
    assert headers[b"retry-after"] == b"3" and headers[b"connection"] == b"close"


def test_the_readiness_gate_lets_other_paths_through_while_not_ready() -> None:
    for path in ("/readyz", "/metrics", "/v2/models/fraud", "/v2/health/ready"):
        status, _, _ = _answer(ReadinessGate(_ok, ready=lambda: False), path)
        assert status == 200, path


def _hold(gate: OverloadGate, statuses: list[int]) -> Any:
    async def one() -> None:
        async def send(m: Any) -> None:
            if m["type"] == "http.response.start":
                statuses.append(m["status"])

        await gate(_scope(), _noop_receive, send)

    return one


def test_beyond_max_inflight_the_gate_refuses_and_the_front_door_sheds_before_the_stack() -> None:
    release = asyncio.Event()
    statuses: list[int] = []
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await _ok(scope, receive, send)

    admission = Admission(2)

    async def main() -> tuple[bool, tuple[int, dict[bytes, bytes], dict[str, Any]]]:
        gate = OverloadGate(app, admission=admission)
        one = _hold(gate, statuses)
        tasks = [asyncio.create_task(one()) for _ in range(2)]
        await asyncio.sleep(0.01)
        full = admission.saturated()
        await one()  # the gate refuses the third at once

        async def stack(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
            reached.append(scope["path"])

        sent: list[Any] = []

        async def send(m: Any) -> None:
            sent.append(m)

        await FrontDoor(stack, admission=admission)(_scope(), _noop_receive, send)
        release.set()
        await asyncio.gather(*tasks)
        return full, (sent[0]["status"], dict(sent[0]["headers"]), json.loads(sent[1]["body"]))

    full, (status, headers, body) = asyncio.run(main())
    assert full is True
    assert statuses == [503, 200, 200]
    assert not admission.saturated()
    # the front door answered without running anything behind it
    assert status == 503 and reached == []
    assert body["error"] == "overloaded: 2 requests in flight"
    # overloaded, not broken: the client keeps its connection (a reconnect costs CPU)
    assert headers[b"retry-after"] == b"1" and b"connection" not in headers


def test_the_front_door_sheds_from_the_head_what_it_would_answer_and_counts_it() -> None:
    """``shed`` is the front door's refusal for the worker's protocol (decision 046): the
    same status, headers and body as its ASGI answer, counted the same way."""
    rejected = Counter("rejected", "refusals", ["status"], registry=CollectorRegistry())
    slot = RuntimeSlot(cast("Any", SimpleNamespace(metrics=SimpleNamespace(rejected=rejected))))
    admission = Admission(1)
    door = FrontDoor(_must_not_run, admission=admission, retry_after_s=2, runtime=slot)
    assert door.shed("/predict") is None  # a free slot: the request goes to the app
    admission.hold()
    status, headers, body = _answer(door)
    shed = door.shed("/predict")
    assert shed is not None and door.shed("/v2/models/fraud/infer") is not None
    assert shed.status == status == 503
    assert (
        json.loads(shed.body)
        == body
        == {
            "error": "overloaded: 1 requests in flight",
            "status": 503,
        }
    )
    assert dict(shed.headers) == {b"content-type": b"application/json", b"retry-after": b"2"}
    assert headers[b"retry-after"] == b"2" and headers[b"content-type"] == b"application/json"
    for path in ("/metrics", "/readyz", "/v2/models/fraud", "/predict/x"):
        assert door.shed(path) is None, path
    assert rejected.labels("503")._value.get() == 3  # the ASGI answer and two shed


def test_front_door_admits_once_a_slot_is_free() -> None:
    admission = Admission(1)  # the bound; nothing in flight
    status, headers, _ = _answer(FrontDoor(_ok, admission=admission))
    assert status == 200 and headers[b"x"] == b"1"


def test_every_nth_admitted_answer_asks_the_client_to_reconnect() -> None:
    def closes(reconnect_every: int) -> list[bool]:
        gate = OverloadGate(_ok, admission=Admission(4), reconnect_every=reconnect_every)
        seen: list[bool] = []

        async def send(m: Any) -> None:
            if m["type"] == "http.response.start":
                headers = dict(m["headers"])
                assert headers[b"x"] == b"1"  # the app's own headers are kept
                seen.append(headers.get(b"connection") == b"close")

        for _ in range(6):
            asyncio.run(gate(_scope(), _noop_receive, send))
        return seen

    assert closes(3) == [False, False, True, False, False, True]
    assert closes(0) == [False] * 6


def test_the_gate_counts_only_its_path() -> None:
    seen = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])

    admission = Admission(1)
    gate = OverloadGate(app, admission=admission)
    asyncio.run(gate(_scope("/readyz"), _noop_receive, None))  # type: ignore[arg-type]
    assert seen == ["/readyz"] and not admission.saturated()


def test_boards_of_one_server_add_up_and_an_earlier_servers_board_is_cleared(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serving" / "inflight-127.0.0.1-3000"
    first, second = (InflightBoard(path, workers=2, worker=w, server_pid=111) for w in (1, 2))
    first.publish(3)
    second.publish(5)
    assert first.total() == second.total() == 8
    # a worker restarted by the same server keeps its siblings' counts
    assert InflightBoard(path, workers=2, worker=2, server_pid=111).total() == 8
    # a new server on the same address does not inherit the old one's counts
    assert InflightBoard(path, workers=2, worker=1, server_pid=222).total() == 0


def test_a_worker_outside_the_server_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="worker 3 is not one of 1..2"):
        InflightBoard(tmp_path / "board", workers=2, worker=3, server_pid=1)
    assert not (tmp_path / "board").exists()


def test_shared_the_bound_holds_over_the_server_not_the_worker(tmp_path: Path) -> None:
    path = tmp_path / "board"
    sibling = InflightBoard(path, workers=2, worker=2, server_pid=7)
    held_here: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        held_here.append(sibling.total())  # this worker's request, seen by its sibling
        await _ok(scope, receive, send)

    admission = Admission(2)
    door = FrontDoor(OverloadGate(app, admission=admission), admission=admission)
    admission.share_with_workers(InflightBoard(path, workers=2, worker=1, server_pid=7))

    sibling.publish(3)  # the sibling holds more than its 2: this idle worker still admits
    status, _, _ = _answer(door)
    assert status == 200 and held_here == [4] and sibling.total() == 3

    sibling.publish(4)  # 2 × 2 in flight over the server: refused here too
    status, _, body = _answer(door)
    assert status == 503 and admission.saturated() and held_here == [4]
    assert body["error"] == "overloaded: 2 requests in flight per worker"


def test_opening_a_board_removes_those_of_servers_that_have_exited(tmp_path: Path) -> None:
    exited = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    gone_pid = int(exited.stdout)
    gone, live = tmp_path / "inflight-127.0.0.1-1", tmp_path / "inflight-127.0.0.1-2"
    gone.write_bytes(struct.pack("3q", gone_pid, 4, 0))
    live.write_bytes(struct.pack("3q", os.getpid(), 1, 1))
    board = InflightBoard(tmp_path / "inflight-127.0.0.1-3", workers=2, worker=1, server_pid=9)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "inflight-127.0.0.1-2",
        "inflight-127.0.0.1-3",
    ]
    assert board.total() == 0 and live.read_bytes() == struct.pack("3q", os.getpid(), 1, 1)
