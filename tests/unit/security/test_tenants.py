"""The verbs of ``mlpipe tenants`` on a project's settings: the control plane they open and
the limits and actor they fill in (control plane in tmp_path; the key checks are in
test_keys.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mlpipe.config import load_settings
from mlpipe.engines import engine_for
from mlpipe.security import add_tenant, list_tenants, pin_tenant, revoke_tenant, tenant_store


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    settings = load_settings(home=tmp_path)
    settings.security.default_rate = 7.5
    settings.security.default_burst = 15
    settings.actor = "alice"
    return settings


def test_tenant_store_is_the_control_plane_of_the_settings(settings: Any) -> None:
    assert tenant_store(settings).url == settings.control
    assert (settings.state_path / "control.db").exists()


def test_limits_left_out_come_from_the_security_settings(settings: Any) -> None:
    tenant, _ = add_tenant(settings, "acme")
    assert (tenant.rate, tenant.burst, tenant.pin) == (7.5, 15, None)


def test_limits_given_win_over_the_defaults(settings: Any) -> None:
    tenant, _ = add_tenant(settings, "acme", rate=2, burst=3, pin="canary")
    assert (tenant.rate, tenant.burst, tenant.pin) == (2.0, 3, "canary")
    assert [(t.name, t.rate, t.burst) for t in list_tenants(settings)] == [("acme", 2.0, 3)]


def test_the_settings_actor_is_recorded_with_the_tenant(settings: Any) -> None:
    add_tenant(settings, "acme")
    with engine_for(settings.control).begin() as conn:
        rows = conn.execute(sa.text("SELECT name, actor FROM tenants")).all()
    assert [tuple(r) for r in rows] == [("acme", "alice")]


def test_list_is_by_name_and_shows_revocation_and_pins(settings: Any) -> None:
    for name in ("zeta", "acme", "mid"):
        add_tenant(settings, name)
    revoke_tenant(settings, "mid")
    pin_tenant(settings, "zeta", "champion")
    assert [(t.name, t.active, t.pin) for t in list_tenants(settings)] == [
        ("acme", True, None),
        ("mid", False, None),
        ("zeta", True, "champion"),
    ]
