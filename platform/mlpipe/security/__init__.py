"""Security of the request path: tenants, API keys, rate limits.

- :class:`TenantStore`: tenants and salted key hashes in the control-plane
  database (``mlpipe tenants add|list|revoke``).
- :class:`TenantDirectory`: the serving side's refreshed, read-only view;
  :meth:`~TenantDirectory.authenticate` checks a key in constant time.
- :class:`LocalBuckets` / :class:`RedisBuckets`: per-tenant token buckets.

PII redaction (keyed hashing) lives with the prediction log:
:class:`mlpipe.predlog.PiiHasher`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlpipe.security._directory import TenantDirectory
from mlpipe.security._keys import Tenant, TenantStore, parse_key, verify_key
from mlpipe.security._limits import LocalBuckets, RateLimiter, RedisBuckets, retry_after

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


def rate_limiter(settings: Settings) -> RateLimiter:
    """Redis buckets if ``security.redis_url`` is set, else this worker's share of local ones."""
    local = LocalBuckets(share=1.0 / settings.serving.workers)
    if settings.security.redis_url:
        return RedisBuckets(settings.security.redis_url, fallback=local)
    return local


__all__ = [
    "LocalBuckets",
    "RateLimiter",
    "RedisBuckets",
    "Tenant",
    "TenantDirectory",
    "TenantStore",
    "add_tenant",
    "list_tenants",
    "parse_key",
    "pin_tenant",
    "rate_limiter",
    "retry_after",
    "revoke_tenant",
    "tenant_store",
    "verify_key",
]
