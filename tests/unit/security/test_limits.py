"""Per-tenant token buckets: in-process (a worker's share) or shared in Redis."""

from __future__ import annotations

import pytest

from mlpipe.security import LocalBuckets, RedisBuckets


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_local_bucket_allows_the_burst_then_paces_at_the_rate() -> None:
    clock = Clock()
    b = LocalBuckets(clock=clock)
    assert [b.take("a", 2.0, 3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = b.take("a", 2.0, 3)
    assert wait == pytest.approx(0.5)
    assert b.take("b", 2.0, 3) == 0.0  # another tenant has its own bucket
    clock.now += 0.5
    assert b.take("a", 2.0, 3) == 0.0
    assert b.take("a", 2.0, 3) > 0


def test_local_bucket_share_splits_the_limit_across_workers() -> None:
    clock = Clock()
    b = LocalBuckets(share=0.5, clock=clock)
    assert sum(b.take("a", 10.0, 10) == 0.0 for _ in range(20)) == 5
    clock.now += 1.0
    assert sum(b.take("a", 10.0, 10) == 0.0 for _ in range(20)) == 5


def _redis_up() -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.2).close()
        return True
    except OSError:
        return False


@pytest.mark.prod
@pytest.mark.redis
@pytest.mark.skipif(not _redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_redis_buckets_are_shared_between_limiters() -> None:
    import uuid

    prefix = f"mlpipe-test:{uuid.uuid4().hex}:"
    a = RedisBuckets("redis://127.0.0.1:6379/0", LocalBuckets(), prefix=prefix)
    b = RedisBuckets("redis://127.0.0.1:6379/0", LocalBuckets(), prefix=prefix)
    allowed = [x.take("t", 1.0, 4) == 0.0 for x in (a, b) * 4]
    assert sum(allowed) == 4


@pytest.mark.prod
def test_redis_down_falls_back_to_local_buckets() -> None:
    r = RedisBuckets("redis://127.0.0.1:1/0", LocalBuckets(clock=Clock()))
    assert [r.take("t", 1.0, 2) == 0.0 for _ in range(3)] == [True, True, False]


def test_a_request_can_cost_several_tokens_and_pays_nothing_when_refused() -> None:
    clock = Clock()
    b = LocalBuckets(clock=clock)
    assert b.take("a", 1.0, 10, cost=6) == 0.0  # 4 left
    assert b.take("a", 1.0, 10, cost=5) == pytest.approx(1.0)  # one short: a second
    assert b.take("a", 1.0, 10, cost=5, paid=1) == 0.0  # 1 already paid: 4 more, 0 left
    assert b.take("a", 1.0, 10) > 0
    assert b.take("a", 1.0, 10, cost=11) == float("inf")  # more than the bucket ever holds


@pytest.mark.prod
@pytest.mark.redis
@pytest.mark.skipif(not _redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_redis_buckets_charge_the_cost() -> None:
    import uuid

    r = RedisBuckets("redis://127.0.0.1:6379/0", LocalBuckets(), prefix=f"t:{uuid.uuid4().hex}:")
    assert r.take("t", 0.001, 10, cost=6) == 0.0
    assert r.take("t", 0.001, 10, cost=5) > 0  # 4 left: refused, nothing taken
    assert r.take("t", 0.001, 10, cost=5, paid=1) == 0.0
    assert r.take("t", 0.001, 10) > 0
    assert r.take("t", 0.001, 10, cost=11) == float("inf")
