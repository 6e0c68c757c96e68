"""The pure rules of the deployment state machine."""

from dataclasses import replace

import pytest

from mlpipe.deployments import Deployment, plan_deploy, plan_promote, plan_rollback, plan_undeploy
from mlpipe.errors import InvalidInput

LIVE = Deployment(model="fraud", generation=1, champion="1")


def test_first_deploy_makes_a_champion() -> None:
    action, nxt = plan_deploy(None, "fraud", "1")
    assert (action, nxt.champion, nxt.previous) == ("deploy", "1", None)


def test_canary_then_promote_then_rollback() -> None:
    _, canary = plan_deploy(LIVE, "fraud", "2", canary=10)
    assert (canary.champion, canary.canary, canary.canary_weight) == ("1", "2", 10.0)
    promoted = plan_promote(canary)
    assert (promoted.champion, promoted.previous, promoted.canary) == ("2", "1", None)
    action, rolled = plan_rollback(promoted)
    assert (action, rolled.champion, rolled.previous) == ("rollback", "1", None)


def test_rollback_with_a_canary_drops_only_the_canary() -> None:
    _, canary = plan_deploy(LIVE, "fraud", "2", canary=10)
    action, rolled = plan_rollback(canary)
    assert (action, rolled.champion, rolled.canary, rolled.canary_weight) == (
        "rollback-canary",
        "1",
        None,
        0.0,
    )


@pytest.mark.parametrize("pct", [0, 100, 150, -5])
def test_canary_percent_out_of_range(pct: float) -> None:
    with pytest.raises(InvalidInput, match=r"--canary must be in \(0, 100\) percent"):
        plan_deploy(LIVE, "fraud", "2", canary=pct)


def test_shadow_accepts_100_but_not_0() -> None:
    _, nxt = plan_deploy(LIVE, "fraud", "2", shadow=100)
    assert (nxt.shadow, nxt.shadow_sample) == ("2", 100.0)
    with pytest.raises(InvalidInput, match=r"--shadow must be in \(0, 100\]"):
        plan_deploy(LIVE, "fraud", "2", shadow=0)


def test_canary_needs_a_champion_and_another_version() -> None:
    with pytest.raises(InvalidInput, match="has no champion yet"):
        plan_deploy(None, "fraud", "2", canary=10)
    with pytest.raises(InvalidInput, match="a canary must be another version"):
        plan_deploy(LIVE, "fraud", "1", canary=10)


def test_promote_without_canary_and_rollback_without_previous() -> None:
    with pytest.raises(InvalidInput, match="fraud has no canary to promote"):
        plan_promote(LIVE)
    with pytest.raises(InvalidInput, match="fraud has no previous version to roll back to"):
        plan_rollback(LIVE)


def test_undeploy_clears_every_arm_and_keeps_the_champion_as_previous() -> None:
    record = Deployment(
        model="fraud",
        generation=4,
        champion="1",
        canary="2",
        canary_weight=10.0,
        shadow="3",
        shadow_sample=5.0,
        previous="0",
    )
    out = plan_undeploy(record)
    assert (out.champion, out.canary, out.shadow, out.previous) == (None, None, None, "1")
    assert (out.canary_weight, out.shadow_sample, out.arms()) == (0.0, 0.0, {})
    with pytest.raises(InvalidInput, match="^fraud is not deployed; nothing was changed$"):
        plan_undeploy(out)
    action, back = plan_rollback(out)
    assert (action, back.champion, back.previous) == ("rollback", "1", None)


def test_a_version_is_never_canary_and_shadow_at_once() -> None:
    _, shadowed = plan_deploy(LIVE, "fraud", "2", shadow=50)
    with pytest.raises(InvalidInput) as refused:
        plan_deploy(shadowed, "fraud", "2", canary=10)
    assert str(refused.value) == (
        "version 2 of fraud is the shadow; a version cannot be canary and shadow at once"
    )
    _, canary = plan_deploy(LIVE, "fraud", "2", canary=10)
    with pytest.raises(InvalidInput, match="version 2 of fraud is the canary; a version cannot "):
        plan_deploy(canary, "fraud", "2", shadow=50)
    _, both = plan_deploy(canary, "fraud", "3", shadow=50)  # another version: fine
    assert (both.canary, both.shadow) == ("2", "3")


def test_a_version_promoted_or_deployed_is_no_longer_its_own_shadow() -> None:
    # a record from before the rule: version 2 both canary and shadow
    old = Deployment(model="fraud", generation=3, champion="1", canary="2", shadow="2")
    promoted = plan_promote(replace(old, canary_weight=10.0))
    assert (promoted.champion, promoted.shadow, promoted.shadow_sample) == ("2", None, 0.0)
    _, shadowed = plan_deploy(LIVE, "fraud", "2", shadow=50)
    _, deployed = plan_deploy(shadowed, "fraud", "2")
    assert (deployed.champion, deployed.shadow) == ("2", None)
    _, kept = plan_deploy(shadowed, "fraud", "3")  # another champion keeps the shadow
    assert kept.shadow == "2"
