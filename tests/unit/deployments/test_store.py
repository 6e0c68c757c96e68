"""The control plane on SQLite in tmp_path: records changed by compare-and-swap with a history
row each, the generations servers poll, and rollout leases (PostgreSQL runs the same code in
tests/integration/test_prod_control_plane.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mlpipe.deployments import ControlPlane, Deployment, RolloutLease
from mlpipe.errors import Conflict


@pytest.fixture
def plane(tmp_path: Path) -> ControlPlane:
    return ControlPlane(f"sqlite:///{tmp_path / 'control.db'}")


def _record(champion: str | None, model: str = "fraud", **fields: object) -> Deployment:
    return Deployment(model=model, champion=champion, actor="ci", **fields)  # type: ignore[arg-type]


def test_a_first_commit_is_generation_1_and_reads_back_in_utc(plane: ControlPlane) -> None:
    stored = plane.commit(_record("1", reason="first"), read_generation=0, action="deploy")
    assert stored.generation == 1
    assert plane.get("fraud") == stored
    assert stored.updated_at.tzinfo is not None and stored.updated_at.utcoffset() == timedelta(0)
    assert plane.get("churn") is None


def test_each_commit_bumps_the_generation_and_adds_a_history_row(plane: ControlPlane) -> None:
    first = plane.commit(_record("1"), read_generation=0, action="deploy")
    canary = replace(first, canary="2", canary_weight=10.0)
    plane.commit(canary, read_generation=1, action="deploy")
    plane.commit(_record("2", previous="1"), read_generation=2, action="promote")
    now = plane.get("fraud")
    assert now is not None
    assert (now.generation, now.champion, now.previous, now.canary, now.canary_weight) == (
        3,
        "2",
        "1",
        None,
        0.0,
    )
    entries = plane.history("fraud")
    assert [(e.generation, e.action, e.champion, e.canary) for e in entries] == [
        (3, "promote", "2", None),
        (2, "deploy", "1", "2"),
        (1, "deploy", "1", None),
    ]
    assert [e.generation for e in plane.history("fraud", limit=2)] == [3, 2]
    assert entries[1].canary_weight == 10.0 and entries[0].actor == "ci"


def test_a_stale_generation_is_a_conflict_and_nothing_changes(plane: ControlPlane) -> None:
    plane.commit(_record("1"), read_generation=0, action="deploy")
    plane.commit(_record("2"), read_generation=1, action="deploy")
    before, history = plane.get("fraud"), plane.history("fraud")
    with pytest.raises(Conflict) as raised:
        plane.commit(_record("3"), read_generation=1, action="deploy")
    assert str(raised.value) == (
        "the deployment of fraud changed concurrently (it was at generation 1 when read); "
        "nothing was changed — check `mlpipe status fraud` and retry"
    )
    assert (plane.get("fraud"), plane.history("fraud")) == (before, history)


def test_two_first_deploys_of_one_model_conflict(plane: ControlPlane) -> None:
    plane.commit(_record("1"), read_generation=0, action="deploy")
    with pytest.raises(Conflict, match=r"it was at generation 0 when read"):
        plane.commit(_record("2"), read_generation=0, action="deploy")
    assert plane.get("fraud").champion == "1"  # type: ignore[union-attr]
    assert len(plane.history("fraud")) == 1


def test_generations_leave_out_an_undeployed_model_and_models_are_by_name(
    plane: ControlPlane,
) -> None:
    plane.commit(_record("1"), read_generation=0, action="deploy")
    plane.commit(_record("4", model="churn"), read_generation=0, action="deploy")
    plane.commit(_record(None, model="churn"), read_generation=1, action="undeploy")
    assert plane.generations() == {"fraud": 1}
    assert [(d.model, d.generation) for d in plane.models()] == [("churn", 2), ("fraud", 1)]


def _lease(owner: str, minutes: int = 5, model: str = "fraud") -> RolloutLease:
    now = datetime.now(UTC).replace(microsecond=0)
    return RolloutLease(
        model=model,
        version="2",
        weight=5.0,
        owner=owner,
        pid=4242,
        host="ci-host",
        started_at=now,
        heartbeat_at=now,
        expires_at=now + timedelta(minutes=minutes),
    )


def test_a_lease_is_held_by_one_owner_until_replaced_or_dropped(plane: ControlPlane) -> None:
    assert plane.lease("fraud") is None
    first = _lease("a")
    assert plane.take_lease(first)
    assert plane.lease("fraud") == first
    assert not plane.take_lease(_lease("b"))
    assert plane.lease("fraud") == first  # the refused take changed nothing
    assert not plane.take_lease(_lease("c"), replacing="b")
    assert plane.take_lease(_lease("c"), replacing="a")
    assert plane.lease("fraud").owner == "c"  # type: ignore[union-attr]
    assert not plane.drop_lease("fraud", "a")
    assert plane.drop_lease("fraud", "c")
    assert plane.lease("fraud") is None
    assert not plane.drop_lease("fraud")


def test_renewing_moves_expiry_and_weight_only_for_the_holder(plane: ControlPlane) -> None:
    held = _lease("a")
    plane.take_lease(held)
    later = held.expires_at + timedelta(minutes=10)
    assert not plane.renew_lease("fraud", "b", expires_at=later, weight=50.0)
    assert plane.lease("fraud") == held
    assert plane.renew_lease("fraud", "a", expires_at=later, weight=50.0)
    renewed = plane.lease("fraud")
    assert renewed is not None
    assert (renewed.expires_at, renewed.weight) == (later, 50.0)
    assert renewed.heartbeat_at >= held.heartbeat_at


def test_the_tables_survive_a_second_plane_on_the_same_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    ControlPlane(url).commit(_record("1"), read_generation=0, action="deploy")
    assert ControlPlane(url).generations() == {"fraud": 1}
