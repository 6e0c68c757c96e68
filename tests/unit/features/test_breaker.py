"""The feature store's circuit breaker, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from mlpipe.config import load_settings
from mlpipe.features import BreakerState, CircuitBreaker, store_breaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def changes() -> list[BreakerState]:
    return []


@pytest.fixture
def breaker(clock: Clock, changes: list[BreakerState]) -> CircuitBreaker:
    return CircuitBreaker(
        "fraud_v1", failures=3, reset_s=5, slow_s=0.25, clock=clock, on_change=changes.append
    )


def _fail(b: CircuitBreaker, n: int) -> None:
    for _ in range(n):
        assert b.allow()
        b.record(ok=False)


def test_opens_after_n_consecutive_failures_only(breaker: CircuitBreaker) -> None:
    _fail(breaker, 2)
    breaker.record(ok=True)  # a success in between resets the count
    _fail(breaker, 2)
    assert breaker.state == "closed"
    _fail(breaker, 1)
    assert breaker.state == "open"
    assert not breaker.allow()


def test_slow_success_counts_as_failure(breaker: CircuitBreaker) -> None:
    for _ in range(3):
        assert breaker.allow()
        breaker.record(ok=True, elapsed_s=1.0)
    assert breaker.state == "open"


def test_half_open_probe_closes_on_success(
    breaker: CircuitBreaker, clock: Clock, changes: list[BreakerState]
) -> None:
    _fail(breaker, 3)
    clock.now += 4.9
    assert not breaker.allow()  # still cooling down: no store call
    clock.now += 0.2
    assert breaker.allow()  # the probe
    assert breaker.state == "half_open"
    assert not breaker.allow()  # only one probe at a time
    breaker.record(ok=True)
    assert breaker.state == "closed" and breaker.allow()
    assert changes == ["open", "half_open", "closed"]


def test_failed_probe_reopens_for_a_full_cooldown(breaker: CircuitBreaker, clock: Clock) -> None:
    _fail(breaker, 3)
    clock.now += 5
    assert breaker.allow()
    breaker.record(ok=False)  # one failure is enough while half-open
    assert breaker.state == "open"
    clock.now += 4.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.allow()


def test_a_lost_probe_does_not_wedge_it(breaker: CircuitBreaker, clock: Clock) -> None:
    _fail(breaker, 3)
    clock.now += 5
    assert breaker.allow()  # the probe's caller never reports back
    clock.now += 4
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()


def test_store_breaker_reports_its_state_on_metrics(tmp_path: Any) -> None:
    settings = load_settings(home=tmp_path)
    b = store_breaker(settings, "unit_breaker_svc")

    def gauge() -> float | None:
        return REGISTRY.get_sample_value(
            "mlpipe_feature_store_breaker_open", {"service": "unit_breaker_svc"}
        )

    assert gauge() == 0
    assert b.failures == settings.reliability.breaker_failures
    _fail(b, b.failures)
    assert gauge() == 1
    b._since -= b.reset_s  # the cooldown is over
    assert b.allow()
    b.record(ok=True)
    assert gauge() == 0
