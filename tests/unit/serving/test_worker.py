"""One worker's uvicorn settings: the head guard as its protocol, at the settings' bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe.serving import Admission, FrontDoor
from mlpipe.serving._header_guard import HeadGuard
from mlpipe.serving._worker import KEEP_ALIVE_S, http_protocol, worker_config


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    pass


def test_the_protocol_is_the_head_guard_at_these_bounds() -> None:
    protocol = http_protocol(1024, 2.5)
    assert isinstance(protocol, type) and issubclass(protocol, HeadGuard)
    assert (protocol.max_bytes, protocol.timeout_s) == (1024, 2.5)
    only_size = http_protocol(1024, 0)
    assert isinstance(only_size, type) and only_size.timeout_s == 0


def test_both_bounds_lifted_is_uvicorns_own_protocol() -> None:
    assert http_protocol(0, 0) == "auto"  # for measuring the guard (decision 025)


def test_the_config_reads_the_serving_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    monkeypatch.setenv("MLPIPE_SERVING__MAX_HEADER_BYTES", "0")
    monkeypatch.setenv("MLPIPE_SERVING__HEADER_TIMEOUT_S", "0")
    config = worker_config(_app, backlog=32, graceful_s=None)
    assert config.http == "auto"
    assert (config.backlog, config.workers, config.timeout_keep_alive) == (32, 1, KEEP_ALIVE_S)
    assert config.log_config is None and not config.server_header
    assert config.lifespan == "on"  # a startup that raises stops the worker, loudly


def test_a_front_door_app_gets_a_protocol_that_sheds_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    admission = Admission(1)
    door = FrontDoor(_app, admission=admission)
    protocol = worker_config(door, backlog=32, graceful_s=None).http
    assert isinstance(protocol, type) and issubclass(protocol, HeadGuard)
    assert protocol.shed is not None and protocol.shed("/predict") is None
    admission.hold()
    shed = protocol.shed("/predict")  # the door's own refusal, asked through the class
    assert shed is not None and shed.status == 503
    other = worker_config(_app, backlog=32, graceful_s=None).http  # not a front door
    assert isinstance(other, type) and issubclass(other, HeadGuard) and other.shed is None


def test_a_front_door_app_hands_its_predict_lane_to_the_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlpipe.config import load_settings
    from mlpipe.serving import Keys, RouteTraffic, RuntimeSlot, predict_lane

    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    settings = load_settings(home=tmp_path, security={"auth": "off"})
    admission = Admission(1)
    lane = predict_lane(
        settings,
        admission=admission,
        runtime=RuntimeSlot(),
        keys=Keys(settings),
        traffic=RouteTraffic(),
    )
    assert lane is not None
    laned = worker_config(
        FrontDoor(_app, admission=admission, lane=lane), backlog=32, graceful_s=None
    ).http
    assert isinstance(laned, type) and issubclass(laned, HeadGuard) and laned.lane is lane
    unlaned = worker_config(FrontDoor(_app, admission=admission), backlog=32, graceful_s=None).http
    assert isinstance(unlaned, type) and unlaned.lane is None  # serving.lane off, or tracing


def test_a_worker_collects_cycles_at_its_own_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set before the service loads (decision 043), so every object of the worker's life
    is collected at them."""
    import gc

    from mlpipe.serving import _worker

    seen: list[tuple[int, ...]] = []

    def load(*args: object, **kwargs: object) -> None:
        seen.append(gc.get_threshold())
        raise SystemExit("stop before serving")

    monkeypatch.setattr(_worker.bentoml, "load", load)
    monkeypatch.setattr(_worker, "configure_worker_logging", lambda: None)
    before = gc.get_threshold()
    try:
        with pytest.raises(SystemExit, match="stop before serving"):
            _worker.serve("service:Scoring", fd=-1, worker_id=1, backlog=1, graceful_s=None)
    finally:
        gc.set_threshold(*before)
    assert seen == [_worker.COLLECTOR_THRESHOLDS] != [before]
