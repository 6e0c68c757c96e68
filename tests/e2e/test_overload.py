"""Admission control on a real server: beyond ``reliability.max_inflight``, fast 503s.

A server admitting 2 requests at a time per worker, 64 clients at once: the
rest are refused with 503, ``Retry-After`` and the connection kept, counted in
``/metrics``, and nothing refused reaches the prediction log. With two
workers the bound is held over the server: BentoML's workers share one
in-flight board (``mlpipe.serving.InflightBoard``), and every slot
is back to zero once the load is over.
"""

from __future__ import annotations

import re
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlpipe.serving import free_port
from tests.e2e.conftest import deploy_one, fire, predlog_rows

pytestmark = pytest.mark.e2e


def _body(i: int) -> dict[str, Any]:
    return {
        "model": "fraud",
        "request_id": f"load-{i}",
        "entity": {"customer_id": i % 500},
        "features": {"amount": float(i), "n_items": 1 + i % 8},
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_beyond_max_inflight_requests_get_fast_503s_and_leave_no_log_row(
    tmp_path_factory: pytest.TempPathFactory, fraud_v1: Path, workers: int
) -> None:
    from mlpipe.config import load_settings
    from mlpipe.serving import ScoringProcess

    home = tmp_path_factory.mktemp("mlpipe-overload")
    settings = load_settings(home=home)
    deploy_one(settings, fraud_v1)
    env = {
        "MLPIPE_RELIABILITY__MAX_INFLIGHT": "2",
        "MLPIPE_RELIABILITY__RECONNECT_EVERY": "0",
        "MLPIPE_PREDLOG__FSYNC_INTERVAL_S": "0.1",
        "MLPIPE_SERVING__MAX_LATENCY_MS": "2000",  # as in conftest: no batcher 503s here
    }
    port = free_port()
    board = settings.state_path / "serving" / f"inflight-127.0.0.1-{port}"
    server = ScoringProcess(
        settings, port=port, workers=workers, log_path=home / "server.log", env=env
    )
    with server:
        responses = fire(server.url, [_body(i) for i in range(300)], concurrency=64)
        metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
        time.sleep(0.3)  # the background fsync tick
        rows = predlog_rows(settings)
        slots = struct.unpack(f"{workers + 1}q", board.read_bytes()) if workers > 1 else ()
        server_pid = server.pid

    if workers > 1:
        owner, *counts = slots
        assert owner == server_pid, slots  # the process that started the workers
        assert counts == [0] * workers, slots  # every admitted request gave its slot back
    else:
        assert not board.exists()  # one worker keeps its count to itself

    statuses = [r.status_code for r in responses]
    assert set(statuses) == {200, 503}, statuses
    refused = [r for r in responses if r.status_code == 503]
    for r in refused:
        per = " per worker" if workers > 1 else ""
        assert r.json() == {"error": f"overloaded: 2 requests in flight{per}", "status": 503}
        assert r.headers["retry-after"] == "1"
        assert r.headers.get("connection") != "close"  # overloaded, not broken
    counted = re.search(r'^mlpipe_rejected_requests_total\{status="503"\} (\S+)$', metrics, re.M)
    assert counted and float(counted.group(1)) == len(refused)
    answered = {r.json()["request_id"] for r in responses if r.status_code == 200}
    logged = {row.request_id for row in rows if row.arm != "shadow"}
    assert logged == answered
