"""``rollout`` end to end on a registered model: real control plane, warehouse and analysis.

``fraud`` v1 is the champion and v2 rolls out. Time does not pass: the ``sleep``
hook stands in for each interval and logs a batch of traffic for both arms
(and loads its outcomes) before the step's analysis reads it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe import deployments, warehouse
from mlpipe.errors import CheckFailed, Conflict, InvalidInput
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration
PER_ARM = 250  # above canary_min_requests (200) and canary_min_labels (100)


class Traffic:
    """One interval of traffic per call: champion right 95 % of the time, canary ``accuracy``."""

    def __init__(self, settings, canary_accuracy: float, canary_version: str = "2") -> None:  # type: ignore[no-untyped-def]
        self.settings = settings
        self.canary_accuracy = canary_accuracy
        self.canary_version = canary_version
        self.batches = 0

    def __call__(self, _seconds: float) -> None:
        self.batches += 1
        rng = np.random.default_rng(self.batches)
        scores = rng.uniform(0, 1, PER_ARM)  # both arms: the same score distribution
        truth = (scores >= 0.5).astype(int)
        now = time.time() - 5
        records, outcomes = [], []
        for arm, version, accuracy in (
            ("champion", "1", 0.95),
            ("canary", self.canary_version, self.canary_accuracy),
        ):
            wrong = rng.uniform(0, 1, PER_ARM) > accuracy
            for i in range(PER_ARM):
                request_id = f"b{self.batches}-{arm}-{i}"
                records.append(
                    PredictionRecord(
                        request_id=request_id,
                        ts=now - i * 0.01,
                        tenant="t",
                        model="fraud",
                        version=version,
                        arm=arm,  # type: ignore[arg-type]
                        generation=1,
                        entity_key=f"customer_id={i}",
                        entity={"customer_id": i},
                        features={"amount": float(i), "txn_count_7d": 3.0},
                        score=float(scores[i]),
                        label=int(truth[i]),
                        latency_ms=4.0,
                    )
                )
                outcomes.append((request_id, int(truth[i] ^ wrong[i])))
        log = self.settings.predlog_path / f"batch-{self.batches}.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
        warehouse.sync(self.settings)
        labels = self.settings.home / f"labels-{self.batches}.csv"
        pd.DataFrame(outcomes, columns=["request_id", "label"]).to_csv(labels, index=False)
        warehouse.load_outcomes(self.settings, labels)


@pytest.fixture
def champion_v1(registered_home: Path, settings):  # type: ignore[no-untyped-def]
    deployments.deploy(settings, "fraud", "1", reason="first champion")
    return settings


def _actions(settings) -> list[tuple[str, str | None, float, str | None]]:  # type: ignore[no-untyped-def]
    return [
        (h.action, h.canary, h.canary_weight, h.reason)
        for h in reversed(deployments.history(settings, "fraud"))
    ]


def test_a_bad_canary_is_rolled_back_by_itself(champion_v1) -> None:  # type: ignore[no-untyped-def]
    settings = champion_v1
    seen: list[tuple[float, str]] = []
    result = deployments.rollout(
        settings,
        "fraud",
        [5, 25, 50, 100],
        interval="10m",
        version="2",
        sleep=Traffic(settings, canary_accuracy=0.6),
        on_step=lambda step, _analysis: seen.append((step.weight, step.verdict)),
    )
    assert result.outcome == "rolled_back" and result.exit_code == 1
    assert seen == [(5, "fail")]
    record = deployments.status(settings, "fraud")
    assert record.champion == "1" and record.canary is None
    assert _actions(settings) == [
        ("deploy", None, 0.0, "first champion"),
        ("canary", "2", 5.0, "rollout step 5%"),
        ("rollback-canary", None, 0.0, "rollout step 5%: canary failed"),
    ]
    (analysis,) = warehouse.list_reports(settings, model="fraud", kind="canary")
    assert analysis.verdict == "fail" and analysis.version == "2"
    failed = [c["name"] for c in analysis.summary["checks"] if c["passed"] is False]
    assert {"auc", "recall", "log_loss"} <= set(failed)  # label metrics (issue 22, item 3)


def test_a_good_canary_reaches_100_percent(champion_v1) -> None:  # type: ignore[no-untyped-def]
    settings = champion_v1
    traffic = Traffic(settings, canary_accuracy=0.95)
    result = deployments.rollout(
        settings, "fraud", [5, 50, 100], interval="10m", version="2", sleep=traffic
    )
    assert result.outcome == "promoted" and result.exit_code == 0
    assert [(s.weight, s.verdict) for s in result.steps] == [
        (5, "pass"),
        (50, "pass"),
        (100, "promoted"),
    ]
    assert traffic.batches == 2
    record = deployments.status(settings, "fraud")
    assert record.champion == "2" and record.previous == "1" and record.canary is None
    assert [a[:3] for a in _actions(settings)] == [
        ("deploy", None, 0.0),
        ("canary", "2", 5.0),
        ("canary", "2", 50.0),
        ("promote", None, 0.0),
    ]
    assert _actions(settings)[-1][3] == "rollout: all steps passed"


def test_a_canary_without_enough_traffic_is_rolled_back_after_max_waits(champion_v1) -> None:  # type: ignore[no-untyped-def]
    settings = champion_v1
    waits: list[float] = []
    result = deployments.rollout(
        settings, "fraud", [5, 100], interval="1m", version="2", max_waits=2, sleep=waits.append
    )
    assert result.outcome == "rolled_back" and waits == [60.0, 60.0]
    assert result.steps[0].verdict == "insufficient" and result.steps[0].analyses == 2
    assert _actions(settings)[-1][3] == "rollout step 5%: canary insufficient data after 2 waits"


def _lease(pid: int, host: str, expires_in_s: float, owner: str = "another"):  # type: ignore[no-untyped-def]
    from mlpipe.deployments import RolloutLease

    now = datetime.now(UTC)
    return RolloutLease(
        model="fraud",
        version="2",
        weight=5.0,
        owner=owner,
        pid=pid,
        host=host,
        started_at=now,
        heartbeat_at=now,
        expires_at=now + timedelta(seconds=expires_in_s),
    )


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_an_abandoned_rollout_blocks_promote_and_rollout_until_resumed(champion_v1) -> None:  # type: ignore[no-untyped-def]
    settings = champion_v1
    deployments.deploy(settings, "fraud", "2", canary=5, reason="rollout step 5%")
    plane = deployments.control_plane(settings)
    assert plane.take_lease(_lease(_dead_pid(), socket.gethostname(), 60))  # as SIGKILL leaves it
    state = deployments.rollout_state(settings, "fraud")
    assert state is not None and state.state == "abandoned"
    for attempt in (
        lambda: deployments.promote(settings, "fraud", force=True),
        lambda: deployments.rollout(settings, "fraud", [5, 100], version="2"),
    ):
        with pytest.raises(Conflict, match="rollout fraud --resume` or `mlpipe rollback fraud`"):
            attempt()
    assert deployments.status(settings, "fraud").generation == 2
    traffic = Traffic(settings, canary_accuracy=0.95)
    result = deployments.rollout(
        settings, "fraud", [1, 5, 50, 100], interval="10m", resume=True, sleep=traffic
    )
    assert result.version == "2" and result.outcome == "promoted"
    assert [(s.weight, s.verdict) for s in result.steps] == [
        (5, "pass"),
        (50, "pass"),
        (100, "promoted"),
    ]
    assert deployments.rollout_state(settings, "fraud") is None


def test_a_running_or_expired_lease_and_resume_without_one(champion_v1) -> None:  # type: ignore[no-untyped-def]
    settings = champion_v1
    with pytest.raises(InvalidInput, match="no abandoned rollout of fraud to resume"):
        deployments.rollout(settings, "fraud", [5, 100], resume=True)
    deployments.deploy(settings, "fraud", "2", canary=5)
    plane = deployments.control_plane(settings)
    assert plane.take_lease(_lease(os.getpid(), socket.gethostname(), 60))  # alive
    assert not plane.take_lease(_lease(os.getpid(), "elsewhere", 60, owner="third"))
    for attempt in (
        lambda: deployments.promote(settings, "fraud", force=True),
        lambda: deployments.rollout(settings, "fraud", [5, 100], resume=True),
    ):
        with pytest.raises(Conflict, match=r"at 5% running .*wait for it, or end it with"):
            attempt()
    assert plane.drop_lease("fraud")
    assert plane.take_lease(_lease(1, "elsewhere", -1))  # another host, expired
    state = deployments.rollout_state(settings, "fraud")
    assert state is not None and state.state == "abandoned"
    deployments.rollback(settings, "fraud")
    assert deployments.rollout_state(settings, "fraud") is None


def test_promote_after_a_failed_rollout_is_refused(champion_v1) -> None:  # type: ignore[no-untyped-def]
    settings = champion_v1
    deployments.rollout(
        settings, "fraud", [5, 100], version="2", sleep=Traffic(settings, canary_accuracy=0.6)
    )
    deployments.deploy(settings, "fraud", "2", canary=5)
    with pytest.raises(CheckFailed, match="latest canary analysis of fraud version 2 is fail"):
        deployments.promote(settings, "fraud")


def test_a_canary_changed_under_the_rollout_is_never_promoted(champion_v1) -> None:  # type: ignore[no-untyped-def]
    """A deploy of v3 that raced the lease (checked before the rollout took it, committed
    during its interval) made the rollout analyse v3 and promote it; now it stops."""
    from dataclasses import replace

    from mlpipe import registry
    from tests.conftest import train_toy_model

    settings = champion_v1
    model_path, data_path = train_toy_model(settings.home / "inputs", seed=3)
    registry.register(settings, "fraud", dataset=data_path, model_path=model_path)
    traffic = Traffic(settings, canary_accuracy=0.95, canary_version="3")

    def other_operator_then_traffic(seconds: float) -> None:
        if traffic.batches == 0:
            plane = deployments.control_plane(settings)
            record = deployments.status(settings, "fraud")
            _, nxt = deployments.plan_deploy(record, "fraud", "3", canary=50)
            plane.commit(
                replace(nxt, actor="other"), read_generation=record.generation, action="canary"
            )
        traffic(seconds)

    changed = r"changed under the rollout of v2 \(generation 3: v3 at 50%"
    with pytest.raises(Conflict, match=changed):
        deployments.rollout(
            settings, "fraud", [5, 100], version="2", sleep=other_operator_then_traffic
        )
    record = deployments.status(settings, "fraud")
    assert (record.champion, record.canary, record.canary_weight) == ("1", "3", 50.0)
    assert [a for a, *_ in _actions(settings)] == ["deploy", "canary", "canary"]
    assert deployments.rollout_state(settings, "fraud") is None
