"""Two gateways, one state: two scoring servers on the prod profile's stores.

The control plane is a fresh PostgreSQL database and the tenant token buckets
live in Redis (``security.redis_url``). A promote committed once is answered by
both gateways (each polls the control plane every 0.5 s here); a tenant's rate
limit holds across both together, not per gateway. (The registry here is the home's SQLite file,
which both processes on this machine share; the MLflow-server registry is
covered by ``test_prod_registry.py``.)
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mlpipe import deployments, security
from mlpipe.config import Settings, load_settings
from mlpipe.serving import free_port
from tests.integration.prod_services import (
    REDIS_URL,
    postgres_database,
    redis_client,
    start_side_by_side,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.redis, pytest.mark.e2e]

BODY = {"model": "fraud", "entity": {}, "features": {"amount": 80.0, "txn_count_7d": 3}}
RATE, BURST, BURST_SECONDS = 20.0, 10, 10.0  # the 10 s burst


@dataclass
class Gateways:
    settings: Settings
    urls: list[str]
    poll_key: str
    limited_key: str


@pytest.fixture
def gateways(registered_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateways]:
    from mlpipe.serving import ScoringProcess

    with redis_client() as redis, postgres_database() as control:
        (registered_home / "mlpipe.toml").write_text(
            f'[profile.prod]\ncontrol_url = "{control}"\n'
            f'[profile.prod.security]\nredis_url = "{REDIS_URL}"\n'
        )
        monkeypatch.setenv("MLPIPE_PROFILE", "prod")
        settings = load_settings()
        deployments.deploy(settings, "fraud", "1")
        suffix = uuid.uuid4().hex[:8]
        names = [f"poll-{suffix}", f"limited-{suffix}"]
        _, poll_key = security.add_tenant(settings, names[0], rate=10_000, burst=10_000)
        _, limited_key = security.add_tenant(settings, names[1], rate=RATE, burst=BURST)
        env = {"MLPIPE_SERVING__RELOAD_INTERVAL_S": "0.5", "MLPIPE_SERVING__MAX_LATENCY_MS": "5"}
        servers = [ScoringProcess(settings, port=free_port(), env=env) for _ in range(2)]
        try:
            start_side_by_side(servers)
            yield Gateways(settings, [s.url for s in servers], poll_key, limited_key)
        finally:
            for server in servers:
                server.stop()
            redis.delete(*(f"mlpipe:bucket:{name}" for name in names))  # type: ignore[attr-defined]


def _version(url: str, key: str) -> str:
    response = httpx.post(f"{url}/predict", json=BODY, headers={"X-API-Key": key}, timeout=10)
    assert response.status_code == 200, response.text
    return str(response.json()["version"])


def _promote_is_seen_by_both(gateways: Gateways) -> None:
    s = gateways.settings
    assert [_version(u, gateways.poll_key) for u in gateways.urls] == ["1", "1"]
    deployments.deploy(s, "fraud", "2", canary=10)
    deployments.promote(s, "fraud", force=True)
    # Each gateway answers with v2 once its poll has read the commit: waited for (20 polls at
    # most), not timed; how soon is the reload interval's business, not this test's.
    deadline = time.monotonic() + 10
    seen: set[str] = set()
    while seen != set(gateways.urls) and time.monotonic() < deadline:
        seen |= {u for u in gateways.urls if _version(u, gateways.poll_key) == "2"}
        time.sleep(0.1)
    assert seen == set(gateways.urls), seen


def _granted(sends: list[float]) -> float:
    """How many of requests arriving at these times one bucket of RATE and BURST lets
    through: it is full at the first, refills at RATE, and never holds more than BURST."""
    tokens, at, granted = float(BURST), sends[0], 0
    for t in sorted(sends):
        tokens = min(BURST, tokens + (t - at) * RATE)
        at = t
        if tokens >= 1:
            tokens -= 1
            granted += 1
    return granted


def _rate_limit_holds_across_both(gateways: Gateways) -> None:
    counts = {200: 0, 429: 0}
    sends: list[float] = []
    lock = threading.Lock()
    start = time.monotonic()

    def hammer(url: str) -> None:
        with httpx.Client(base_url=url, headers={"X-API-Key": gateways.limited_key}) as client:
            while (sent := time.monotonic()) - start < BURST_SECONDS:
                status = client.post("/predict", json=BODY, timeout=10).status_code
                with lock:
                    counts[status] = counts.get(status, 0) + 1
                    sends.append(sent)

    threads = [threading.Thread(target=hammer, args=(u,)) for u in gateways.urls for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Tokens are granted when a request arrives: what one shared bucket grants for these
    # send times. Not BURST + RATE x the window: a stall of this loaded machine with no
    # request arriving lets the bucket fill to BURST and waste the rest of that time's
    # tokens (179 let through where the window said 210, one bucket all along).
    allowed = _granted(sends)
    assert counts[429] > 0, counts  # the load was over the limit
    # two buckets (one a gateway) would let about twice through
    assert abs(counts[200] - allowed) <= 0.1 * allowed, (counts, allowed)


def test_two_gateways_share_deployments_and_rate_limits(gateways: Gateways) -> None:
    """One pair of servers (they take a while to start) for both properties."""
    _promote_is_seen_by_both(gateways)
    _rate_limit_holds_across_both(gateways)
