"""Security of the request path: tenants, API keys, rate limits.

- :class:`TenantStore`: tenants and salted key hashes in the control-plane
  database (``mlpipe tenants add|list|revoke``).
- :class:`TenantDirectory`: the serving side's refreshed, read-only view;
  :meth:`~TenantDirectory.authenticate` checks a key in constant time.
- :class:`LocalBuckets` / :class:`RedisBuckets`: per-tenant token buckets;
  :func:`rate_limiter` picks the ones the settings name.
- :func:`add_tenant`, :func:`list_tenants`, :func:`pin_tenant`,
  :func:`revoke_tenant`: the verbs of ``mlpipe tenants``, on a project's settings.

PII redaction (keyed hashing) lives with the prediction log:
:class:`mlpipe.predlog.PiiHasher`.
"""

from mlpipe.security._directory import TenantDirectory
from mlpipe.security._keys import Tenant, TenantStore, parse_key, verify_key
from mlpipe.security._limits import (
    LocalBuckets,
    RateLimiter,
    RedisBuckets,
    rate_limiter,
    retry_after,
)
from mlpipe.security._tenants import (
    add_tenant,
    list_tenants,
    pin_tenant,
    revoke_tenant,
    tenant_store,
)

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
