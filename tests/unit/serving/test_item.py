"""A request's item in a batch: its routing key and logged entity, which items are
logged, and failing the rows of one request together."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlpipe.config import load_settings
from mlpipe.errors import InvalidInput, MlpipeError
from mlpipe.serving import PredictRequest
from mlpipe.serving._error_bodies import ServerFailure, TimedOut
from mlpipe.serving._item import Item, fail_together, join_entity, logged, routing_key
from tests.unit.serving.test_pipeline import ListSink, NoFeaturesControl, fake_runtime

FAILED = InvalidInput("features.amount: no")
LATER = ServerFailure("later")


def _item(i: int, error: MlpipeError | None = None) -> Item:
    req = PredictRequest(model="m", features={"amount": 1.0}, request_id=f"r{i}")
    served = SimpleNamespace(name="m", generation=1)
    return Item(req, i, served, SimpleNamespace(), "champion", f"k{i}", error=error)


def test_one_failed_item_fails_every_item_with_its_error() -> None:
    items = [_item(0), _item(1, FAILED), _item(2), _item(3, LATER)]
    fail_together(items)
    assert [it.error for it in items] == [FAILED, FAILED, FAILED, LATER]


def test_items_without_a_failure_are_left_alone() -> None:
    items = [_item(0), _item(1)]
    fail_together(items)
    assert [it.error for it in items] == [None, None]


def test_the_answered_and_the_timed_out_are_logged_the_failed_are_not() -> None:
    answered, failed, late = _item(0), _item(1, FAILED), _item(2, TimedOut("late"))
    late.status = "timeout"
    assert logged([answered, failed, late]) == [answered, late]


@pytest.fixture
def fraud(tmp_path: Path) -> Any:
    built = fake_runtime(load_settings(home=tmp_path), ListSink())
    yield built.loader.models["fraud"]
    built.pipeline.close()


def test_only_join_keys_route_and_are_logged(fraud: Any) -> None:
    req = PredictRequest(
        model="fraud", entity={"customer_id": 7, "junk": "x"}, features={}, request_id="a"
    )
    assert join_entity(fraud, req) == {"customer_id": 7}
    assert routing_key(fraud, req) == "customer_id=7"


def test_a_model_without_join_keys_routes_by_request_id_and_logs_the_whole_entity(
    tmp_path: Path,
) -> None:
    control = NoFeaturesControl()
    control.set("plain", 1, "1")
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    try:
        plain = built.loader.models["plain"]
        bare = PredictRequest(model="plain", features={}, request_id="a1")
        assert (join_entity(plain, bare), routing_key(plain, bare)) == ({}, "request_id=a1")
        own = bare.model_copy(update={"entity": {"session": "s9"}})
        assert (join_entity(plain, own), routing_key(plain, own)) == (
            {"session": "s9"},
            "session=s9",
        )
    finally:
        built.pipeline.close()
