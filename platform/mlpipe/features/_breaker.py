"""A circuit breaker for the online feature store, so a dead store costs nothing per request.

Closed: every read goes to the store. After ``failures`` consecutive failed
(or slower than ``slow_s``) reads it opens: reads are refused at once — the
caller serves defaults and flags them — for ``reset_s``. Then one read is let
through as a probe (half-open): a success closes the breaker, a failure opens
it for another ``reset_s``. A probe whose caller never reports back does not
wedge it: another probe is let through ``reset_s`` later.

:func:`store_breaker` builds one from ``settings.reliability`` that reports
its state as ``mlpipe_feature_store_breaker_open{service}`` (1 while open or
half-open) on ``/metrics``. prometheus-client is imported on first use, for
the reason given in :mod:`mlpipe.serving._metrics`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mlpipe.config import Settings

logger = logging.getLogger("mlpipe.features")

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Closed → open after N consecutive failures → one probe after a cooldown → closed."""

    def __init__(
        self,
        name: str,
        *,
        failures: int,
        reset_s: float,
        slow_s: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.name = name
        self.failures = failures
        self.reset_s = reset_s
        self.slow_s = slow_s
        self._clock = clock
        self._on_change = on_change
        self._state: BreakerState = "closed"
        self._consecutive = 0
        self._since = 0.0  # when it last opened or let a probe through
        self._lock = threading.Lock()

    @property
    def state(self) -> BreakerState:
        return self._state

    def allow(self) -> bool:
        """Whether the caller may call the store now (a True while not closed is the probe)."""
        with self._lock:
            if self._state == "closed":
                return True
            now = self._clock()
            if now - self._since < self.reset_s:
                return False
            self._since = now
            self._set("half_open")
            return True

    def record(self, ok: bool, elapsed_s: float = 0.0) -> None:
        """Report the outcome of an allowed call; a call slower than ``slow_s`` counts as failed."""
        failed = not ok or elapsed_s > self.slow_s
        with self._lock:
            if not failed:
                self._consecutive = 0
                self._set("closed")
                return
            self._consecutive += 1
            if self._state == "half_open" or self._consecutive >= self.failures:
                self._since = self._clock()
                self._set("open")

    def _set(self, state: BreakerState) -> None:
        if state == self._state:
            return
        log = logger.warning if state == "open" else logger.info
        log("feature-store breaker %s: %s → %s", self.name, self._state, state)
        self._state = state
        if self._on_change is not None:
            self._on_change(state)


def store_breaker(settings: Settings, service: str) -> CircuitBreaker:
    """The breaker of one feature service, from ``settings.reliability``, reported on /metrics."""
    r = settings.reliability
    gauge = _open_gauge().labels(service)
    gauge.set(0)
    return CircuitBreaker(
        service,
        failures=r.breaker_failures,
        reset_s=r.breaker_reset_s,
        slow_s=r.breaker_slow_s,
        on_change=lambda state: gauge.set(0 if state == "closed" else 1),
    )


_lock = threading.Lock()
_gauge: Any = None


def _open_gauge() -> Any:
    global _gauge
    with _lock:
        if _gauge is None:
            from prometheus_client import Gauge

            _gauge = Gauge(
                "mlpipe_feature_store_breaker_open",
                "1 while the feature store's circuit breaker is open or probing",
                ["service"],
                multiprocess_mode="livemax",  # open in any live worker
            )
        return _gauge
