"""Tenants and their API keys: stored hashed, verified in constant time, revoked, pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlpipe.config import load_settings
from mlpipe.errors import Conflict, InvalidInput, NotFound
from mlpipe.security import (
    TenantDirectory,
    add_tenant,
    list_tenants,
    parse_key,
    pin_tenant,
    revoke_tenant,
    tenant_store,
)


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    return load_settings(home=tmp_path)


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


def test_bad_pins_are_refused_and_change_nothing(settings: Any) -> None:
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
