"""The auth middleware: keys, per-tenant limits and pins on the request path (no server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mlpipe.config import load_settings
from mlpipe.security import (
    LocalBuckets,
    TenantDirectory,
    add_tenant,
    list_tenants,
    revoke_tenant,
    tenant_store,
)
from mlpipe.serving import UNAUTHORIZED, AuthGateway, SecurityMetrics
from mlpipe.serving._context import context_of


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    return load_settings(home=tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- middleware --


class App:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _call(gw: AuthGateway, path: str = "/predict", headers: Any = ()) -> tuple[int, dict, Any]:
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "POST", "headers": list(headers)}
    asyncio.run(gw(scope, receive, send))
    status = sent[0]["status"]
    hdrs = dict(sent[0]["headers"])
    body = sent[1]["body"]
    return status, hdrs, (json.loads(body) if status != 200 else body)


def _gateway(settings: Any, limiter: Any = None) -> tuple[AuthGateway, App]:
    app = App()
    d = TenantDirectory(tenant_store(settings))
    d.reload()
    gw = AuthGateway(
        app,
        settings=settings,
        directory=d,
        limiter=limiter or LocalBuckets(clock=Clock()),
        metrics=SecurityMetrics(CollectorRegistry()),
    )
    return gw, app


def test_without_tenants_auto_mode_serves_everyone_as_default(settings: Any) -> None:
    gw, app = _gateway(settings)
    assert _call(gw)[0] == 200
    assert context_of(app.seen[0]).caller.tenant == "default"


def test_once_a_tenant_exists_keys_are_required(settings: Any) -> None:
    _, key = add_tenant(settings, "acme", rate=1, burst=2)
    revoked_t, revoked = add_tenant(settings, "gone")
    revoke_tenant(settings, "gone")
    gw, app = _gateway(settings)
    bodies = []
    for headers in (
        [],
        [(b"authorization", b"Bearer nonsense")],
        [(b"x-api-key", revoked.encode())],
        [(b"authorization", b"Basic " + key.encode())],
    ):
        status, hdrs, body = _call(gw, headers=headers)
        assert status == 401 and hdrs[b"www-authenticate"] == b"Bearer"
        bodies.append(body)
    assert all(b == UNAUTHORIZED for b in bodies)
    assert not app.seen
    assert _call(gw, headers=[(b"authorization", b"Bearer " + key.encode())])[0] == 200
    assert _call(gw, headers=[(b"x-api-key", key.encode())])[0] == 200
    assert [context_of(s).caller.tenant for s in app.seen] == ["acme", "acme"]
    status, hdrs, body = _call(gw, headers=[(b"x-api-key", key.encode())])
    assert status == 429 and hdrs[b"retry-after"] == b"1" and "acme" in body["error"]
    assert body["status"] == 429


def test_open_paths_need_no_key(settings: Any) -> None:
    add_tenant(settings, "acme")
    gw, _ = _gateway(settings)
    for path in ("/livez", "/readyz", "/metrics"):
        assert _call(gw, path=path)[0] == 200
    assert _call(gw, path="/docs.json")[0] == 401


def test_auth_on_without_tenants_refuses_everyone(settings: Any) -> None:
    settings.security.auth = "on"
    gw, _ = _gateway(settings)
    assert _call(gw)[0] == 401


def test_auth_off_ignores_keys(settings: Any) -> None:
    add_tenant(settings, "acme")
    settings.security.auth = "off"
    gw, app = _gateway(settings)
    assert _call(gw)[0] == 200 and context_of(app.seen[0]).caller.tenant == "default"


def test_per_tenant_counters(settings: Any) -> None:
    _, key = add_tenant(settings, "acme", rate=1, burst=1)
    gw, _ = _gateway(settings)
    for _ in range(3):
        _call(gw, headers=[(b"x-api-key", key.encode())])
    _call(gw)
    m = gw.metrics
    assert m.tenant_requests.labels("acme", "allowed")._value.get() == 1
    assert m.tenant_requests.labels("acme", "throttled")._value.get() == 2
    assert m.auth_rejected._value.get() == 1


# -- pinning --


def test_a_pinned_tenant_gets_its_arm_and_the_pin_reaches_the_gateway(settings: Any) -> None:
    from mlpipe.security import pin_tenant

    _, key = add_tenant(settings, "acme", pin="canary")
    _, other = add_tenant(settings, "beta")
    gw, app = _gateway(settings)
    _call(gw, headers=[(b"x-api-key", key.encode())])
    _call(gw, headers=[(b"x-api-key", other.encode())])
    assert [context_of(s).caller.pin for s in app.seen] == ["canary", None]
    assert pin_tenant(settings, "acme", None).pin is None
    assert pin_tenant(settings, "beta", "champion").pin == "champion"
    assert {t.name: t.pin for t in list_tenants(settings)} == {"acme": None, "beta": "champion"}
