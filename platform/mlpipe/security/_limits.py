"""Token buckets per tenant: in-process (split across workers) or shared in Redis.

``take(tenant, rate, burst, cost, paid)`` returns 0.0 when the request may go
(and takes ``cost - paid`` tokens: a request costs one, an Open Inference
Protocol infer request one per row, of which it ``paid`` one on arrival), else
the seconds until enough tokens are there (what ``Retry-After`` says), or
infinity when ``cost`` is more than the bucket ever holds. In-process buckets
cannot see the other workers, so each worker gets ``1/workers`` of the rate and
burst — exact under even load balancing, which BentoML's shared socket gives
only roughly; a Redis bucket is exact across workers and gateways.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mlpipe.config import Settings

logger = logging.getLogger("mlpipe.security")


class RateLimiter(Protocol):
    def take(
        self, tenant: str, rate: float, burst: int, cost: float = 1.0, paid: float = 0.0
    ) -> float: ...


class LocalBuckets:
    """Token buckets in this process; ``share`` is this process's fraction of each limit."""

    def __init__(self, share: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self._clock = clock
        self._state: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()

    def take(
        self, tenant: str, rate: float, burst: int, cost: float = 1.0, paid: float = 0.0
    ) -> float:
        rate_here = rate * self.share
        cap = max(1.0, burst * self.share)
        if cost > cap:
            return math.inf
        cost -= paid
        now = self._clock()
        with self._lock:
            tokens, at = self._state.get(tenant, (cap, now))
            tokens = min(cap, tokens + (now - at) * rate_here)
            if tokens >= cost:
                self._state[tenant] = (tokens - cost, now)
                return 0.0
            self._state[tenant] = (tokens, now)
            return (cost - tokens) / rate_here


_LUA = """
local rate = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
if cost > cap then return 'inf' end
cost = cost - tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(v[1]) or cap
local at = tonumber(v[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= cost then tokens = tokens - cost else wait = (cost - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return tostring(wait)
"""


class RedisBuckets:
    """One bucket per tenant in Redis, updated atomically by a Lua script (Redis's clock).

    If Redis cannot be reached the request is judged by ``fallback`` (a local
    bucket) and the failure logged: a limiter outage must not take scoring down.
    """

    def __init__(self, url: str, fallback: RateLimiter, prefix: str = "mlpipe:bucket:") -> None:
        import redis

        self._client = redis.Redis.from_url(url, socket_timeout=0.05, socket_connect_timeout=0.05)
        self._script = self._client.register_script(_LUA)
        self._fallback = fallback
        self._prefix = prefix
        self._warned_at = 0.0

    def take(
        self, tenant: str, rate: float, burst: int, cost: float = 1.0, paid: float = 0.0
    ) -> float:
        import redis

        try:
            args = [rate, burst, cost, paid]
            return float(self._script(keys=[self._prefix + tenant], args=args))
        except redis.RedisError:
            now = time.monotonic()
            if now - self._warned_at > 10:
                self._warned_at = now
                logger.exception("rate limiter: Redis unreachable, using per-process buckets")
            return self._fallback.take(tenant, rate, burst, cost, paid)


def retry_after(wait_s: float) -> int:
    """Whole seconds for ``Retry-After`` (at least 1)."""
    return max(1, math.ceil(wait_s))


def rate_limiter(settings: Settings) -> RateLimiter:
    """Redis buckets if ``security.redis_url`` is set, else this worker's share of local ones."""
    local = LocalBuckets(share=1.0 / settings.serving.workers)
    if settings.security.redis_url:
        return RedisBuckets(settings.security.redis_url, fallback=local)
    return local
