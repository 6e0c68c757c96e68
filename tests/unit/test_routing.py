"""Routing: sticky, monotonic, share ≈ weight.

How fast a decision is is measured by ``bench.components`` ("router
decision"), not asserted here: a wall-clock bound fails on a busy machine.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlpipe.routing import Router, bucket, entity_key

KEYS = [f"customer_id={i}" for i in range(20_000)]


def test_bucket_is_stable_and_in_range() -> None:
    b = bucket("customer_id=42", "fraud:canary:2")
    assert b == bucket("customer_id=42", "fraud:canary:2")
    assert all(0 <= bucket(k, "s") < 100 for k in KEYS[:1000])


def test_salt_changes_the_bucket() -> None:
    a = [bucket(k, "fraud:canary:2") for k in KEYS[:200]]
    b = [bucket(k, "fraud:canary:3") for k in KEYS[:200]]
    assert a != b


def test_entity_key_is_normalized() -> None:
    assert entity_key({"customer_id": 42}) == "customer_id=42"
    assert entity_key({"b": 1, "a": "x"}) == entity_key({"a": "x", "b": 1}) == "a=x&b=1"


def test_sticky_same_key_same_arm() -> None:
    r = Router("fraud", champion="1", canary="2", canary_weight=20)
    for k in KEYS[:500]:
        assert len({r.route(k).arm for _ in range(3)}) == 1


@pytest.mark.parametrize("weight", [5, 20, 50])
def test_share_close_to_weight(weight: float) -> None:
    r = Router("fraud", champion="1", canary="2", canary_weight=weight)
    share = sum(r.route(k).arm == "canary" for k in KEYS) / len(KEYS) * 100
    assert abs(share - weight) < 1.0


def test_monotonic_when_weight_rises() -> None:
    low = Router("fraud", champion="1", canary="2", canary_weight=20)
    high = Router("fraud", champion="1", canary="2", canary_weight=40)
    on_low = {k for k in KEYS if low.route(k).arm == "canary"}
    on_high = {k for k in KEYS if high.route(k).arm == "canary"}
    assert on_low <= on_high
    assert len(on_high) > len(on_low)


def test_canary_version_answers_on_canary() -> None:
    r = Router("fraud", champion="1", canary="2", canary_weight=100)
    assert r.route("x").version == "2"
    assert Router("fraud", champion="1").route("x").version == "1"


def test_shadow_sampled_independently() -> None:
    r = Router("fraud", champion="1", shadow="3", shadow_sample=50)
    decisions = [r.route(k) for k in KEYS]
    assert all(d.arm == "champion" for d in decisions)
    share = sum(d.shadow == "3" for d in decisions) / len(KEYS) * 100
    assert abs(share - 50) < 2
    full = Router("fraud", champion="1", shadow="3", shadow_sample=100)
    assert all(full.route(k).shadow == "3" for k in KEYS[:500])


def test_for_deployment() -> None:
    dep = SimpleNamespace(
        model="fraud",
        champion="1",
        canary="2",
        canary_weight=30.0,
        shadow=None,
        shadow_sample=0.0,
    )
    r = Router.for_deployment(dep)
    assert (r.canary, r.canary_weight, r.shadow) == ("2", 30.0, None)
    with pytest.raises(ValueError):
        Router.for_deployment(SimpleNamespace(model="m", champion=None))


def test_a_pin_overrides_the_split_but_not_the_shadow_sample() -> None:
    r = Router("fraud", champion="1", canary="2", canary_weight=20, shadow="3", shadow_sample=50)
    assert {r.route(k, "canary").version for k in KEYS[:500]} == {"2"}
    assert {r.route(k, "champion").version for k in KEYS[:500]} == {"1"}
    assert [r.route(k, "canary").shadow for k in KEYS[:500]] == [
        r.route(k).shadow for k in KEYS[:500]
    ]
    # no canary deployed: a canary-pinned tenant gets the champion
    alone = Router("fraud", champion="1")
    assert alone.route("customer_id=1", "canary") == alone.route("customer_id=1")
