"""What the predict lane takes from a request's head, and what it leaves to the app.

The lane's answers are compared with the app's on a real server in
``tests/e2e/test_predict_lane.py``; here, the decision alone: a head the
layers above the gateway would pass untouched is the lane's, every other goes
through the app, and a key the auth layer would refuse is refused the same way.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mlpipe.config import load_settings
from mlpipe.security import LocalBuckets, TenantDirectory, tenant_store
from mlpipe.serving import UNAUTHORIZED, Admission, Keys, RuntimeSlot, SecurityMetrics
from mlpipe.serving._context import ANONYMOUS
from mlpipe.serving._header_guard import Shed
from mlpipe.serving._lane import Laned, PredictLane

PLAIN = [(b"host", b"t"), (b"content-type", b"application/json"), (b"content-length", b"40")]


class _Series:
    """BentoML's traffic series of ``/predict``, as the lane records in them."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def began(self) -> None:
        self.events.append("began")

    def answered(self, status: int, seconds: float) -> None:
        self.events.append(status)

    def ended(self) -> None:
        self.events.append("ended")


class _Traffic:
    def __init__(self, series: _Series | None) -> None:
        self._series = series

    def series(self, label: str) -> _Series | None:
        assert label == "/predict"
        return self._series


def _lane(
    tmp_path: Path,
    *,
    auth: str = "off",
    ready: bool = True,
    inflight: int = 0,
    series: _Series | None = None,
) -> PredictLane:
    settings = load_settings(home=tmp_path, security={"auth": auth})
    directory = None
    if auth != "off":
        directory = TenantDirectory(tenant_store(settings))
        directory.reload()
    keys = Keys(
        settings,
        directory=directory,
        limiter=LocalBuckets(),
        metrics=SecurityMetrics(CollectorRegistry()),
    )
    admission = Admission(2)
    for _ in range(inflight):
        admission.hold()
    return PredictLane(
        admission=admission,
        runtime=RuntimeSlot(),
        keys=keys,
        traffic=_Traffic(series if series is not None else _Series()),
        max_body_bytes=1024,
        timeout_s=5.0,
        max_batch_size=16,
        ready=lambda: ready,
    )


def _scope(headers: list[tuple[bytes, bytes]] = PLAIN, path: str = "/predict") -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "headers": headers}


def test_a_plain_predict_head_is_the_lanes_with_its_caller_and_series(tmp_path: Path) -> None:
    series = _Series()
    taken = _lane(tmp_path, series=series).take(_scope())
    assert isinstance(taken, Laned)
    assert taken.caller is ANONYMOUS and taken.series is series
    assert series.events == ["began"]


def _without(name: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in PLAIN if k != name]


@pytest.mark.parametrize(
    "headers",
    [
        _without(b"content-type"),
        [*_without(b"content-type"), (b"content-type", b"application/json; charset=utf-8")],
        [*_without(b"content-type"), (b"content-type", b"application/x-www-form-urlencoded")],
        [*PLAIN, (b"content-type", b"application/json")],  # two lines: the intake checks each
        _without(b"content-length"),
        [*_without(b"content-length"), (b"transfer-encoding", b"chunked")],
        [*_without(b"content-length"), (b"content-length", b"1025")],  # over the limit: 413
        [*_without(b"content-length"), (b"content-length", b"+40")],
        [*PLAIN, (b"expect", b"100-continue")],
    ],
    ids=[
        "no-type",
        "charset",
        "form",
        "two-types",
        "no-length",
        "chunked",
        "too-long",
        "odd-length",
        "expect",
    ],
)
def test_any_other_head_is_left_to_the_app(tmp_path: Path, headers: Any) -> None:
    series = _Series()
    assert _lane(tmp_path, series=series).take(_scope(headers)) is None
    assert series.events == []  # the app's RouteMetrics counts it


@pytest.mark.parametrize(
    "lane",
    [
        {"ready": False},  # the readiness gate's 503
        {"inflight": 2},  # the overload gate's 503
    ],
    ids=["loading", "saturated"],
)
def test_a_worker_not_ready_or_saturated_leaves_it_to_the_app(
    tmp_path: Path, lane: dict[str, Any]
) -> None:
    assert _lane(tmp_path, **lane).take(_scope()) is None


def test_other_paths_and_a_worker_before_its_app_has_metrics_leave_it_to_the_app(
    tmp_path: Path,
) -> None:
    assert _lane(tmp_path).take(_scope(path="/v2/models/fraud/infer")) is None
    no_series = _lane(tmp_path)
    no_series.traffic = _Traffic(None)
    assert no_series.take(_scope()) is None


def test_a_missing_key_is_refused_from_the_head_as_the_auth_layer_refuses_it(
    tmp_path: Path,
) -> None:
    series = _Series()
    taken = _lane(tmp_path, auth="on", series=series).take(_scope())
    assert isinstance(taken, Shed)
    assert taken.status == 401 and json.loads(taken.body) == UNAUTHORIZED
    assert taken.body == json.dumps(UNAUTHORIZED).encode()  # as the layer's send_json
    assert list(taken.headers) == [  # in send_json's order, as the auth layer answers it
        (b"content-type", b"application/json"),
        (b"content-length", str(len(taken.body)).encode()),
        (b"www-authenticate", b"Bearer"),
        (b"connection", b"close"),
    ]
    assert series.events == ["began", 401, "ended"]


class _Cycle:
    def __init__(self, body: bytes) -> None:
        self.body = body


class _Connection:
    """The protocol's side of an answer: what the lane gives, and whether it closes."""

    def __init__(self) -> None:
        self.given: list[tuple[Shed, bool]] = []

    def give(self, cycle: Any, answer: Shed, *, close: bool) -> None:
        self.given.append((answer, close))


def _handed_over(lane: PredictLane, bodies: list[bytes]) -> list[_Connection]:
    """Take a plain head and hand over each body in one loop turn; the lane's answers."""

    async def run() -> list[_Connection]:
        connections = []
        for body in bodies:
            taken = lane.take(_scope())
            assert isinstance(taken, Laned)
            connection = _Connection()
            lane.submit(connection, _Cycle(body), taken)
            connections.append(connection)
        while any(not c.given for c in connections):
            await asyncio.sleep(0.01)
        return connections

    return asyncio.run(asyncio.wait_for(run(), 10))


def test_a_request_the_gateway_refuses_is_answered_with_its_error_and_its_slot_freed(
    tmp_path: Path,
) -> None:
    series = _Series()
    lane = _lane(tmp_path, series=series)
    (malformed, not_ready) = _handed_over(lane, [b"{not json", b'{"model": "fraud"}'])
    answer, close = malformed.given[0]
    assert answer.status == 400 and not close
    assert json.loads(answer.body)["error"].startswith("malformed JSON")
    answer, close = not_ready.given[0]  # the slot holds no runtime: the gateway's 503
    assert answer.status == 503
    assert json.loads(answer.body) == {"error": "not ready: models still loading", "status": 503}
    assert lane.admission.inflight == 0
    assert series.events == ["began", "began", 400, "ended", 503, "ended"]


def test_a_fault_in_the_lane_gets_the_apps_500_and_frees_the_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlpipe.serving import _lane as lane_module

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(lane_module, "parse_request", broken)
    lane = _lane(tmp_path)
    (connection,) = _handed_over(lane, [b"{}"])
    answer, close = connection.given[0]
    assert (answer.status, answer.body, close) == (500, b"Internal Server Error", True)
    assert lane.admission.inflight == 0


def test_a_request_handed_over_once_the_worker_filled_gets_the_overload_gates_503(
    tmp_path: Path,
) -> None:
    lane = _lane(tmp_path)
    taken = lane.take(_scope())
    assert isinstance(taken, Laned)
    lane.admission.hold(), lane.admission.hold()  # filled while the body came
    connection = _Connection()
    lane.submit(connection, _Cycle(b"{}"), taken)
    answer, close = connection.given[0]
    assert answer.status == 503 and not close
    assert (b"retry-after", b"1") in answer.headers
    assert lane.admission.inflight == 2  # it took no slot
