"""What the stack learns about one request, typed, under one scope key.

Each fact is set once, by the layer that learns it, and read by the layers
below through :func:`context_of`:

- ``route``, what the path asks for (:func:`route_of`), when the context is
  made: by the front door, the outermost layer, so the path is matched once;
- ``caller`` (tenant, pinned arm, and a way to charge the tenant more
  tokens), by the auth layer;
- ``received_ns``, the arrival time the 504 deadline (``request_timeout_s``
  from it, in the pipeline) and the logged latency count from, by the intake.

It lives in ``scope["mlpipe.context"]``, not in ``scope["state"]``, which
uvicorn fills from the lifespan state and Starlette reads as its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from mlpipe.serving._asgi import Scope
from mlpipe.serving._oip_schema import PREFIX as _OIP

DEFAULT_TENANT = "default"
SCOPE_KEY = "mlpipe.context"


class Route(enum.Enum):
    """What a request's path asks for, as far as mlpipe's layers care."""

    PREDICT = "predict"  # /predict
    INFER = "infer"  # /v2/models/{name}/infer (and .../versions/{v}/infer)
    PROTOCOL = "protocol"  # any other path under /v2
    DOCS = "docs"  # /docs.json, which the gateway rewrites
    OTHER = "other"  # BentoML's: /livez, /readyz, /metrics, ...

    @property
    def scoring(self) -> bool:
        """A request for a prediction: admission and readiness apply to it."""
        return self is Route.PREDICT or self is Route.INFER


def route_of(scope: Scope) -> Route:
    """The route of an HTTP ``scope`` (anything else is :attr:`Route.OTHER`)."""
    if scope["type"] != "http":
        return Route.OTHER
    return route_of_path(scope["path"])


def route_of_path(path: str) -> Route:
    """The route of an HTTP request's (decoded) path."""
    if path == "/predict":
        return Route.PREDICT
    if path == _OIP or path.startswith(_OIP + "/"):
        if path.startswith(_OIP + "/models/") and path.endswith("/infer"):
            return Route.INFER
        return Route.PROTOCOL
    if path == "/docs.json":
        return Route.DOCS
    return Route.OTHER


class Charge(Protocol):
    """Take ``cost`` tokens from the caller's bucket, ``paid`` of them already taken.

    Returns 0.0 when taken, else the seconds to wait (``inf``: more than the
    bucket ever holds); see :mod:`mlpipe.security`'s limits.
    """

    def __call__(self, cost: float, *, paid: float = 0.0) -> float: ...


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent the request: the tenant the log row names, its pin, and its charge.

    ``charge`` is None when no tenant is authenticated (auth off, or no tenants yet).
    """

    tenant: str = DEFAULT_TENANT
    pin: str | None = None
    charge: Charge | None = None


ANONYMOUS = Caller()


@dataclass(slots=True)
class RequestContext:
    """One request's facts; each field is written by one layer (the module's doc says which)."""

    route: Route
    caller: Caller = ANONYMOUS
    received_ns: int | None = None


def context_of(scope: Scope) -> RequestContext:
    """The request's context, made (and its route matched) on first use."""
    ctx: RequestContext | None = scope.get(SCOPE_KEY)
    if ctx is None:
        ctx = scope[SCOPE_KEY] = RequestContext(route_of(scope))
    return ctx


__all__ = [
    "ANONYMOUS",
    "DEFAULT_TENANT",
    "SCOPE_KEY",
    "Caller",
    "Charge",
    "RequestContext",
    "Route",
    "context_of",
]
