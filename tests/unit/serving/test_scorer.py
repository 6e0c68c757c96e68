"""The score stage: one model call per version, the prediction cache, and the row-by-row
retry that lets a poison row fail alone."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mlpipe.serving import PredictRequest, VersionPlan
from mlpipe.serving._caches import LRUCache
from mlpipe.serving._error_bodies import error_for, status_of
from mlpipe.serving._item import Item
from mlpipe.serving._scorer import Scorer

POISON = 666.0


class CountingModel:
    """P(class 1) = amount / 100; a row with ``POISON`` is rejected (ValueError)."""

    features = ["amount"]

    def __init__(self, version: str = "1", out_of_range: bool = False) -> None:
        self.version = version
        self.calls: list[int] = []
        self.out_of_range = out_of_range

    def predict_scores(self, x: np.ndarray) -> np.ndarray:
        self.calls.append(len(x))
        if (x[:, 0] == POISON).any():
            raise ValueError("a poison amount")
        if self.out_of_range:
            return x[:, 0] * 0 + 1.5
        return x[:, 0] / 100.0


def _items(model: CountingModel, amounts: list[float], generation: int = 1) -> list[Item]:
    plan = VersionPlan(model, None, frozenset(), ("amount",))
    served = SimpleNamespace(name="m", generation=generation)
    return [
        Item(
            PredictRequest(model="m", features={"amount": a}, request_id=f"r{i}"),
            i,
            served,
            plan,
            "champion",
            f"k{i}",
            vector=[a],
        )
        for i, a in enumerate(amounts)
    ]


@pytest.fixture
def scorer() -> Scorer:
    return Scorer(LRUCache(100))


def test_a_batch_is_scored_in_one_call_then_answered_from_the_cache(scorer: Scorer) -> None:
    model = CountingModel()
    items = _items(model, [10.0, 20.0, 30.0])
    scorer.score(items)
    assert model.calls == [3]
    assert [it.prediction and it.prediction.score for it in items] == pytest.approx([0.1, 0.2, 0.3])
    assert [it.prediction and it.prediction.label for it in items] == [0, 0, 0]
    again = _items(model, [20.0, 40.0])
    scorer.score(again)
    assert model.calls == [3, 1]  # only the miss
    assert [it.cache_hit for it in again] == [True, False]


def test_each_version_is_scored_in_a_call_of_its_own(scorer: Scorer) -> None:
    one, two = CountingModel("1"), CountingModel("2")
    scorer.score([*_items(one, [1.0, 2.0]), *_items(two, [3.0, 4.0, 5.0])])
    assert (one.calls, two.calls) == ([2], [3])


def test_a_poison_row_fails_alone_and_the_others_are_scored_and_cached(scorer: Scorer) -> None:
    model = CountingModel()
    items = _items(model, [10.0, POISON, 30.0])
    scorer.score(items)
    assert model.calls == [3, 1, 1, 1]  # the batch, then row by row
    poison = items[1]
    assert poison.prediction is None and poison.error is not None
    assert error_for(poison.error) == {
        "error": "the model rejected this input: a poison amount",
        "status": 422,
        "field": "features",
    }
    assert [it.error for it in (items[0], items[2])] == [None, None]
    assert [it.prediction and it.prediction.score for it in (items[0], items[2])] == pytest.approx(
        [0.1, 0.3]
    )
    again = _items(model, [10.0, POISON, 30.0])
    scorer.score(again)
    assert [it.cache_hit for it in again] == [True, False, True]  # the poison is not cached
    assert model.calls == [3, 1, 1, 1, 1, 1]  # the one miss as a batch, then alone
    assert again[1].error is not None


def test_an_output_the_task_cannot_read_is_the_servers_failure(scorer: Scorer) -> None:
    items = _items(CountingModel(out_of_range=True), [10.0])
    scorer.score(items)
    assert items[0].error is not None and status_of(items[0].error) == 500
    assert items[0].prediction is None


def test_a_new_generation_is_not_answered_from_the_old_ones_entries(scorer: Scorer) -> None:
    model = CountingModel()
    scorer.score(_items(model, [10.0], generation=1))
    newer = _items(model, [10.0], generation=2)
    scorer.score(newer)
    assert model.calls == [1, 1] and not newer[0].cache_hit
