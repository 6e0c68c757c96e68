"""The shadow runner: shadow versions scored and logged off the response path, within a
bounded backlog beyond which their work is dropped and counted."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mlpipe.config import load_settings
from mlpipe.predlog import PiiHasher
from mlpipe.serving import PredictRequest, serving_metrics
from mlpipe.serving._caches import LRUCache
from mlpipe.serving._feature_stage import FeatureStage
from mlpipe.serving._item import Item, routing_key
from mlpipe.serving._log_rows import LogRows
from mlpipe.serving._scorer import Scorer
from mlpipe.serving._shadow import ShadowRunner
from tests.unit.serving.test_pipeline import CURSED_AMOUNT, FakeFeatures, ListSink, fake_runtime


class GatedFeatures(FeatureStage):
    """The real stage, held until ``gate`` opens: a shadow batch still running."""

    __slots__ = ("gate",)

    def __init__(self) -> None:
        super().__init__(FakeFeatures())
        self.gate = threading.Event()

    def fill(self, items: Any) -> None:
        assert self.gate.wait(30), "the test never opened the gate"
        super().fill(items)


class BrokenScorer(Scorer):
    def score(self, items: Any) -> None:
        raise RuntimeError("scorer broke")


@pytest.fixture
def env(tmp_path: Path) -> Any:
    built = fake_runtime(load_settings(home=tmp_path), ListSink())
    built.control.set("fraud", 2, "1", shadow="2", sample=100)
    built.loader.refresh()
    built.metrics = serving_metrics(CollectorRegistry())
    yield built
    built.pipeline.close()


def _answered(env: Any, cids: list[int], amount: float = 10.0) -> list[Item]:
    """Items answered by the champion, each with the shadow version ``2`` to score."""
    served = env.loader.models["fraud"]
    items = []
    for i, cid in enumerate(cids):
        req = PredictRequest(
            model="fraud",
            entity={"customer_id": cid},
            features={"amount": amount},
            request_id=f"r{cid}",
        )
        plan = served.versions["1"]
        items.append(Item(req, i, served, plan, "champion", routing_key(served, req), "2"))
    return items


def _runner(
    env: Any, features: FeatureStage, scorer: Scorer | None = None, **kw: Any
) -> ShadowRunner:
    scorer = scorer or Scorer(LRUCache(100))
    return ShadowRunner(features, scorer, LogRows(PiiHasher([], "k")), env.sink, env.metrics, **kw)


def _counted(env: Any, result: str) -> float:
    return env.metrics.shadow.labels("fraud", "2", result)._value.get()


def test_shadow_rows_are_logged_with_arm_shadow_and_counted(env: Any) -> None:
    runner = _runner(env, FeatureStage(FakeFeatures()))
    runner.submit(_answered(env, [1, 2, 3]))
    runner.close()  # waits for the thread
    assert [(r.arm, r.version, r.entity_key) for r in env.sink.rows] == [
        ("shadow", "2", f"customer_id={c}") for c in (1, 2, 3)
    ]
    assert _counted(env, "scored") == 3


def test_a_shadow_row_its_version_cannot_score_is_not_logged(env: Any) -> None:
    runner = _runner(env, FeatureStage(FakeFeatures()))
    runner.submit([*_answered(env, [1]), *_answered(env, [2], amount=CURSED_AMOUNT)])
    runner.close()
    assert [r.entity_key for r in env.sink.rows] == ["customer_id=1"]


def test_beyond_its_backlog_shadow_work_is_dropped_and_counted(env: Any) -> None:
    features = GatedFeatures()
    runner = _runner(env, features, backlog=1)
    try:
        runner.submit(_answered(env, [1]))  # held at the gate: the backlog is full
        runner.submit(_answered(env, [2, 3]))
        runner.submit(_answered(env, [4]))
        assert _counted(env, "dropped") == 3
    finally:
        features.gate.set()
        runner.close()
    assert [r.entity_key for r in env.sink.rows] == ["customer_id=1"]
    assert _counted(env, "scored") == 1


def test_a_failed_shadow_is_counted_and_frees_its_place(
    env: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runner = _runner(env, FeatureStage(FakeFeatures()), BrokenScorer(LRUCache(1)), backlog=1)
    try:
        runner.submit(_answered(env, [1, 2]))
        # counted only after the failed run gave its place back
        assert _eventually(lambda: _counted(env, "failed") == 2)
        runner.submit(_answered(env, [3]))  # accepted, not dropped
    finally:
        runner.close()
    assert _counted(env, "failed") == 3 and _counted(env, "dropped") == 0
    assert env.sink.rows == []
    assert "shadow scoring failed for 2 requests" in caplog.text


def _eventually(check: Any) -> bool:
    """Whether ``check()`` holds within 30 s (a bound on a hang, not a timing assertion)."""
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
