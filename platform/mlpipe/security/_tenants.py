"""Tenant operations on a project's settings: the verbs behind ``mlpipe tenants``.

Each opens the control plane the settings name and fills what the caller left
out (limits) from ``settings.security``; :class:`~mlpipe.security.TenantStore`
does the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlpipe.security._keys import Tenant, TenantStore

if TYPE_CHECKING:
    from mlpipe.config import Settings


def tenant_store(settings: Settings) -> TenantStore:
    """The tenant table of these settings' control plane."""
    return TenantStore(settings.control)


def add_tenant(
    settings: Settings,
    name: str,
    *,
    rate: float | None = None,
    burst: int | None = None,
    pin: str | None = None,
) -> tuple[Tenant, str]:
    """Create a tenant (limits default to ``security.default_*``); returns it and its key."""
    s = settings.security
    return tenant_store(settings).add(
        name,
        rate=s.default_rate if rate is None else rate,
        burst=s.default_burst if burst is None else burst,
        actor=settings.actor,
        pin=pin,
    )


def pin_tenant(settings: Settings, name: str, arm: str | None) -> Tenant:
    """Route all of a tenant's requests to ``arm`` (champion or canary); None unpins.

    Servers apply it within ``security.key_refresh_s``. A tenant pinned to the
    canary gets the champion while no canary is deployed.
    """
    return tenant_store(settings).pin(name, arm)


def list_tenants(settings: Settings) -> list[Tenant]:
    return tenant_store(settings).list()


def revoke_tenant(settings: Settings, name: str) -> Tenant:
    """Revoke a tenant's key; servers refuse it within ``security.key_refresh_s``."""
    return tenant_store(settings).revoke(name)
