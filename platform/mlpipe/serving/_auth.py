"""Authentication and per-tenant rate limits: pure-ASGI middleware in front of mlpipe's others.

The outermost of mlpipe's layers inside BentoML's app (the order is in
:mod:`mlpipe.serving._stack`). Per request on a protected path (every path but
``security.open_paths``):

- the key comes from ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``; a
  missing, malformed, unknown, wrong or revoked key gets the same 401 body
  (``WWW-Authenticate: Bearer``) after the same constant-time work, and
  ``Connection: close``: its body is never read, and a client without a key
  has no connection worth keeping (issue 29, item 2);
- the tenant's token bucket is taken; an empty one gets 429 with ``Retry-After``;
- the request context's ``caller`` is set (:class:`~mlpipe.serving._context.Caller`):
  the tenant and the arm it is pinned to (or None), which the gateway copies
  into the request (the tenant goes into the prediction-log row, the pin into
  routing), and ``charge``, which takes more from the same bucket
  (``charge(cost, paid=1)``: 0.0, or the seconds to wait; see
  :mod:`mlpipe.security`'s limits) and which the Open Inference Protocol layer
  uses to charge a token per row.

A rejected request never reaches the gateway, so it leaves no log row.
``security.auth``: ``"auto"`` (default) requires keys once any tenant exists in
the control plane and serves everyone as tenant ``default`` before that (the
embedded demo keeps working); ``"on"`` and ``"off"`` force it.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from mlpipe.errors import StoreUnavailable
from mlpipe.security import TenantDirectory, rate_limiter, retry_after, tenant_store
from mlpipe.serving._asgi import CONNECTION_CLOSE, ASGIApp, Receive, Scope, Send, send_json
from mlpipe.serving._context import ANONYMOUS, Caller, context_of
from mlpipe.serving._error_bodies import RateLimited, Unauthenticated, error_for

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.security import RateLimiter


logger = logging.getLogger("mlpipe.security")

UNAUTHORIZED = error_for(Unauthenticated("missing or invalid API key"))


class Keys:
    """The keys and rate limits of one worker: what :class:`AuthGateway` and the predict lane
    (:mod:`mlpipe.serving._lane`) both ask, so a request is judged the same either way.

    The tenant directory's refresh thread starts with :meth:`start` (the layer's
    construction, in the worker), not when this is made (the service's import, in
    processes that never serve too).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        directory: TenantDirectory | None = None,
        limiter: RateLimiter | None = None,
        metrics: Any = None,
    ) -> None:
        s = settings.security
        self.mode = s.auth
        self.open_exact = frozenset(p for p in s.open_paths if not p.endswith("*"))
        self.open_prefixes = tuple(p[:-1] for p in s.open_paths if p.endswith("*"))
        self.directory = directory
        self._settings = settings
        self.limiter = limiter or rate_limiter(settings)
        self._metrics = metrics

    def start(self) -> Keys:
        """Start reading the tenants (once; not with ``security.auth`` off)."""
        if self.directory is None and self.mode != "off":
            refresh_s = self._settings.security.key_refresh_s
            self.directory = TenantDirectory(tenant_store(self._settings), refresh_s).start()
        return self

    @property
    def metrics(self) -> Any:
        if self._metrics is None:
            self._metrics = security_metrics()
        return self._metrics

    def is_open(self, path: str) -> bool:
        return path in self.open_exact or path.startswith(self.open_prefixes or ("\0",))

    def judge(self, headers: list[tuple[bytes, bytes]]) -> Caller | Denied:
        """The caller of a request on a protected path with these headers, charged a token,
        or the refusal to answer it with (its body and extra headers)."""
        d = self.directory
        required = self.mode == "on" or (self.mode == "auto" and d is not None and d.any_tenants)
        if self.mode != "off" and (d is None or not d.loaded):
            return Denied(error_for(StoreUnavailable("tenants unavailable")), [CONNECTION_CLOSE])
        if not required:
            return ANONYMOUS
        assert d is not None
        tenant = d.authenticate(_key_from(headers))
        if tenant is None:
            self.metrics.auth_rejected.inc()
            return Denied(UNAUTHORIZED, [(b"www-authenticate", b"Bearer"), CONNECTION_CLOSE])
        wait = self.limiter.take(tenant.name, tenant.rate, tenant.burst)
        if wait > 0:
            self.metrics.tenant_requests.labels(tenant.name, "throttled").inc()
            seconds = retry_after(wait)
            body = error_for(
                RateLimited(
                    f"rate limit of tenant {tenant.name!r} exceeded "
                    f"({tenant.rate:g}/s, burst {tenant.burst}); retry after {seconds}s"
                )
            )
            # Answered before its body was read: the connection closes after it (HeadGuard), so
            # say so, or a client sends its next request into the closing connection.
            return Denied(body, [(b"retry-after", str(seconds).encode()), CONNECTION_CLOSE])
        self.metrics.tenant_requests.labels(tenant.name, "allowed").inc()
        charge = functools.partial(self.limiter.take, tenant.name, tenant.rate, tenant.burst)
        return Caller(tenant.name, tenant.pin, charge)


class Denied(NamedTuple):
    """An error body (its ``status`` the HTTP status) and the headers to add to it."""

    body: dict[str, Any]
    headers: list[tuple[bytes, bytes]]


class AuthGateway:
    """401 without a valid key, 429 over the tenant's rate; sets the request context's caller."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: Settings,
        keys: Keys | None = None,
        directory: TenantDirectory | None = None,
        limiter: RateLimiter | None = None,
        metrics: Any = None,
    ) -> None:
        self.app = app
        self.keys = (
            keys or Keys(settings, directory=directory, limiter=limiter, metrics=metrics)
        ).start()

    @property
    def metrics(self) -> Any:
        return self.keys.metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.keys.is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        judged = self.keys.judge(scope["headers"])
        if isinstance(judged, Denied):
            await _reply(scope, send, judged.body, judged.headers)
            return
        context_of(scope).caller = judged
        await self.app(scope, receive, send)


def _key_from(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip().decode("latin-1")
        elif name == b"x-api-key" and value.strip():
            return value.strip().decode("latin-1")
    return None


async def _reply(
    scope: Scope,
    send: Send,
    body: dict[str, Any],
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Answer with the error ``body`` (its ``status`` is the HTTP status); a websocket is closed."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send_json(send, body["status"], body, extra or [])


class SecurityMetrics:
    """Per-tenant request counters and auth failures (prometheus-client, imported late)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter

        reg = registry or REGISTRY
        self.tenant_requests = Counter(
            "mlpipe_tenant_requests",
            "Authenticated requests per tenant (allowed or throttled with 429)",
            ["tenant", "result"],
            registry=reg,
        )
        self.auth_rejected = Counter(
            "mlpipe_auth_rejected", "Requests refused with 401", registry=reg
        )


_lock = threading.Lock()
_metrics: SecurityMetrics | None = None


def security_metrics() -> SecurityMetrics:
    """The process's security metrics (default registry, created once)."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = SecurityMetrics()
        return _metrics


__all__ = ["UNAUTHORIZED", "AuthGateway", "Keys", "Denied", "SecurityMetrics", "security_metrics"]
