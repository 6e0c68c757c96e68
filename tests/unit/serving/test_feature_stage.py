"""The features and vector stage: one store call per feature service, defaults when the
store is down, a refused key failing its request alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlpipe.config import load_settings
from mlpipe.errors import InvalidInput
from mlpipe.serving import PredictRequest, ScoringPipeline
from mlpipe.serving._error_bodies import error_for
from mlpipe.serving._feature_stage import FeatureStage
from mlpipe.serving._item import Item, routing_key
from tests.unit.serving.test_pipeline import (
    SPEC,
    FakeFeatures,
    ListSink,
    NoFeaturesControl,
    fake_runtime,
)


@pytest.fixture
def env(tmp_path: Path) -> Any:
    built = fake_runtime(load_settings(home=tmp_path), ListSink())
    yield built
    built.pipeline.close()


def _items(served: Any, cids: list[int], amount: float = 10.0) -> list[Item]:
    reqs = [
        PredictRequest(
            model=served.name,
            entity={"customer_id": c},
            features={"amount": amount},
            request_id=f"r{c}",
        )
        for c in cids
    ]
    plan = served.versions["1"]
    return [
        Item(r, i, served, plan, "champion", routing_key(served, r)) for i, r in enumerate(reqs)
    ]


def test_one_store_call_for_the_batch_and_each_vector_in_the_models_order(env: Any) -> None:
    feats = FakeFeatures()
    items = _items(env.loader.models["fraud"], [3, 4, -1])
    FeatureStage(feats).fill(items)
    assert feats.calls == [3]
    assert [it.vector for it in items[:2]] == [[10.0, 3.0, 3.0], [10.0, 4.0, 4.0]]
    assert [it.feature_hit for it in items[:2]] == [False, True]  # the fake hits even ids
    unknown = items[2]  # an entity the store does not know: its service's defaults, flagged
    assert unknown.vector == [10.0, SPEC.defaults["txn_count_1h"], SPEC.defaults["avg_amount_7d"]]
    assert unknown.missing == SPEC.features
    assert all(it.error is None for it in items)


def test_a_store_that_is_down_serves_defaults_and_fails_nothing(
    env: Any, caplog: pytest.LogCaptureFixture
) -> None:
    items = _items(env.loader.models["fraud"], [3, 4])
    FeatureStage(FakeFeatures(down=True)).fill(items)
    assert [it.missing for it in items] == [SPEC.features, SPEC.features]
    assert [it.vector for it in items] == [[10.0, 0.0, 50.0]] * 2
    assert all(it.error is None for it in items)
    assert "feature fetch for fraud_v1 failed; serving defaults" in caplog.text


def test_a_key_the_store_refuses_fails_only_its_own_item(env: Any) -> None:
    calls: list[int] = []

    def fetch(service: str, entities: list[dict[str, Any]]) -> list[Any]:
        calls.append(len(entities))
        if any(e["customer_id"] == 13 for e in entities):
            raise InvalidInput("entity.customer_id: 13 is unlucky")
        return FakeFeatures()(service, entities)

    items = _items(env.loader.models["fraud"], [12, 13, 14])
    FeatureStage(fetch).fill(items)
    assert calls == [3, 1, 1, 1]  # the batch, then entity by entity
    assert [it.error and error_for(it.error)["status"] for it in items] == [None, 422, None]
    assert items[1].error and error_for(items[1].error)["field"] == "entity.customer_id"
    assert items[0].missing == [] and items[2].missing == []


def test_a_version_without_a_feature_service_reads_no_store(tmp_path: Path) -> None:
    control = NoFeaturesControl()
    control.set("plain", 1, "1")
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    try:
        feats = FakeFeatures()
        items = _items(built.loader.models["plain"], [1, 2], amount=4.0)
        FeatureStage(feats).fill(items)
        assert feats.calls == []
        assert [it.vector for it in items] == [[4.0], [4.0]]
        assert [it.missing for it in items] == [[], []]
    finally:
        built.pipeline.close()


def test_a_key_the_store_refuses_fails_its_request_alone(env: Any) -> None:
    def fetch(service: str, entities: list[dict[str, Any]]) -> list[Any]:
        if any(e["customer_id"] == 13 for e in entities):
            raise InvalidInput("entity.customer_id: 13 is unlucky")
        return FakeFeatures()(service, entities)

    pipeline = ScoringPipeline(env.rt.settings, env.loader, env.sink, fetch_features=fetch)
    try:
        out = pipeline.predict_batch(
            [
                PredictRequest(
                    model="fraud",
                    entity={"customer_id": c},
                    features={"amount": 10.0},
                    request_id=f"r{c}-10.0",
                )
                for c in (12, 13, 14)
            ]
        )
    finally:
        pipeline.close()
    assert [r.get("status") for r in out] == [None, 422, None]
    assert out[1]["field"] == "entity.customer_id"
    assert out[0]["features_missing"] == [] and out[2]["features_missing"] == []
    assert [r.request_id for r in env.sink.rows] == [out[0]["request_id"], out[2]["request_id"]]
