"""Tenants, keys, token buckets and the auth middleware (no server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mlpipe.config import load_settings
from mlpipe.errors import Conflict, InvalidInput, NotFound
from mlpipe.security import (
    LocalBuckets,
    RedisBuckets,
    TenantDirectory,
    add_tenant,
    list_tenants,
    parse_key,
    revoke_tenant,
    tenant_store,
)
from mlpipe.serving.auth import UNAUTHORIZED, AuthGateway, SecurityMetrics


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    return load_settings(home=tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- keys --


def test_add_returns_a_key_that_authenticates_and_is_stored_only_hashed(settings: Any) -> None:
    tenant, key = add_tenant(settings, "acme", rate=5, burst=10)
    parsed = parse_key(key)
    assert parsed is not None
    d = TenantDirectory(tenant_store(settings))
    d.reload()
    assert d.authenticate(key) == tenant
    secret = parsed[1]  # not key.rsplit("_"): the secret's alphabet has "_" in it
    db = (settings.state_path / "control.db").read_bytes()
    wal = settings.state_path / "control.db-wal"
    stored = db + (wal.read_bytes() if wal.exists() else b"")
    assert secret.encode() not in stored and key.encode() not in stored
    assert "salt" not in tenant.public() and "key_hash" not in tenant.public()


def test_wrong_unknown_malformed_and_revoked_keys_are_refused(settings: Any) -> None:
    _, key = add_tenant(settings, "acme")
    _, other = add_tenant(settings, "beta")
    d = TenantDirectory(tenant_store(settings))
    d.reload()
    key_id = parse_key(key)[0]  # type: ignore[index]
    wrong = f"mlp_{key_id}_{'x' * 43}"
    unknown = f"mlp_{'0' * 12}_{'x' * 43}"
    for bad in (None, "", "nonsense", wrong, unknown, key + "x", key[:-1]):
        assert d.authenticate(bad) is None, bad
    revoke_tenant(settings, "acme")
    d.reload()
    assert d.authenticate(key) is None
    assert d.authenticate(other) is not None
    assert [t.active for t in list_tenants(settings)] == [False, True]


def test_add_rejects_bad_names_duplicates_and_limits(settings: Any) -> None:
    add_tenant(settings, "acme")
    with pytest.raises(Conflict):
        add_tenant(settings, "acme")
    for name in ("", "a b", "-x", "x" * 101, "../etc"):
        with pytest.raises(InvalidInput):
            add_tenant(settings, name)
    with pytest.raises(InvalidInput):
        add_tenant(settings, "zero", rate=0)
    with pytest.raises(NotFound):
        revoke_tenant(settings, "nobody")


def test_revoke_is_idempotent(settings: Any) -> None:
    add_tenant(settings, "acme")
    first = revoke_tenant(settings, "acme")
    assert revoke_tenant(settings, "acme").revoked_at == first.revoked_at


# -- buckets --


def test_local_bucket_allows_the_burst_then_paces_at_the_rate() -> None:
    clock = Clock()
    b = LocalBuckets(clock=clock)
    assert [b.take("a", 2.0, 3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = b.take("a", 2.0, 3)
    assert wait == pytest.approx(0.5)
    assert b.take("b", 2.0, 3) == 0.0  # another tenant has its own bucket
    clock.now += 0.5
    assert b.take("a", 2.0, 3) == 0.0
    assert b.take("a", 2.0, 3) > 0


def test_local_bucket_share_splits_the_limit_across_workers() -> None:
    clock = Clock()
    b = LocalBuckets(share=0.5, clock=clock)
    assert sum(b.take("a", 10.0, 10) == 0.0 for _ in range(20)) == 5
    clock.now += 1.0
    assert sum(b.take("a", 10.0, 10) == 0.0 for _ in range(20)) == 5


def _redis_up() -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.2).close()
        return True
    except OSError:
        return False


@pytest.mark.redis
@pytest.mark.skipif(not _redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_redis_buckets_are_shared_between_limiters() -> None:
    import uuid

    prefix = f"mlpipe-test:{uuid.uuid4().hex}:"
    a = RedisBuckets("redis://127.0.0.1:6379/0", LocalBuckets(), prefix=prefix)
    b = RedisBuckets("redis://127.0.0.1:6379/0", LocalBuckets(), prefix=prefix)
    allowed = [x.take("t", 1.0, 4) == 0.0 for x in (a, b) * 4]
    assert sum(allowed) == 4


def test_redis_down_falls_back_to_local_buckets() -> None:
    r = RedisBuckets("redis://127.0.0.1:1/0", LocalBuckets(clock=Clock()))
    assert [r.take("t", 1.0, 2) == 0.0 for _ in range(3)] == [True, True, False]


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
    assert app.seen[0]["state"]["tenant"] == "default"


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
    assert [s["state"]["tenant"] for s in app.seen] == ["acme", "acme"]
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
    assert _call(gw)[0] == 200 and app.seen[0]["state"]["tenant"] == "default"


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
    assert [s["state"]["pin"] for s in app.seen] == ["canary", None]
    assert pin_tenant(settings, "acme", None).pin is None
    assert pin_tenant(settings, "beta", "champion").pin == "champion"
    assert {t.name: t.pin for t in list_tenants(settings)} == {"acme": None, "beta": "champion"}


def test_bad_pins_are_refused_and_change_nothing(settings: Any) -> None:
    from mlpipe.security import pin_tenant

    with pytest.raises(
        InvalidInput, match="pin: 'shadow' is not an arm; use one of champion, canary"
    ):
        add_tenant(settings, "acme", pin="shadow")
    assert list_tenants(settings) == []
    add_tenant(settings, "acme", pin="canary")
    with pytest.raises(InvalidInput, match="pin: '3' is not an arm"):
        pin_tenant(settings, "acme", "3")
    with pytest.raises(NotFound, match="no tenant 'nobody'"):
        pin_tenant(settings, "nobody", "canary")
    assert [t.pin for t in list_tenants(settings)] == ["canary"]


def test_a_control_plane_from_before_pinning_gains_the_column(settings: Any) -> None:
    import sqlalchemy as sa

    settings.state_path.mkdir(parents=True)
    engine = sa.create_engine(settings.control)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE tenants (name VARCHAR(100) PRIMARY KEY, "
                "key_id VARCHAR(32) NOT NULL UNIQUE, salt VARCHAR(64) NOT NULL, "
                "key_hash VARCHAR(64) NOT NULL, rate FLOAT NOT NULL, "
                "burst INTEGER NOT NULL, created_at DATETIME NOT NULL, "
                "revoked_at DATETIME, actor VARCHAR(128) NOT NULL)"
            )
        )
    engine.dispose()
    tenant, _ = add_tenant(settings, "acme", pin="champion")
    assert tenant.pin == "champion" and list_tenants(settings)[0].pin == "champion"
