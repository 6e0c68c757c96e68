"""The checks a request's inputs pass when it is admitted, on the float-array path."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mlpipe.errors import InvalidInput
from mlpipe.serving import PredictRequest, VersionPlan
from mlpipe.serving._input_checks import check_inputs, finite_floats
from tests.unit.serving.test_pipeline import SPEC

FLAG = SimpleNamespace(kind="boolean", expected="a boolean")
COUNT = SimpleNamespace(kind="integer", expected="an integer")


def _plan(nullable: frozenset[str] = frozenset(), spec: Any = SPEC) -> VersionPlan:
    """A float-array version reading ``amount``, ``count`` and ``flag`` from the request."""
    columns = {"flag": FLAG, "count": COUNT}
    schema = SimpleNamespace(nullable_names=nullable, column=columns.get)
    model = SimpleNamespace(
        features=["amount", "count", "flag", "avg_amount_7d"], version="1", input_schema=schema
    )
    store = frozenset({"avg_amount_7d"}) if spec is not None else frozenset()
    return VersionPlan(model, spec, store, ("amount", "count", "flag"))


def _req(entity: Any = None, **features: Any) -> PredictRequest:
    values = {"amount": 1.0, "count": 2.0, "flag": True, **features}
    entity = {"customer_id": 7} if entity is None else entity
    return PredictRequest(model="m", entity=entity, features=values)


def _refusal(plan: VersionPlan, req: PredictRequest) -> str:
    with pytest.raises(InvalidInput) as caught:
        check_inputs(plan, req)
    return str(caught.value)


def test_finite_floats_is_the_fast_path_and_nothing_else_is() -> None:
    assert finite_floats({"a": 1.5, "b": -2.0})
    assert finite_floats({})
    for features in ({"a": 1}, {"a": "1.5"}, {"a": True}, {"a": None}, {"a": float("nan")}):
        assert not finite_floats(features), features
    assert not finite_floats({"a": 1e308, "b": 1e308})  # an overflowing sum: the full check


def test_good_inputs_pass() -> None:
    check_inputs(_plan(), _req())
    check_inputs(_plan(), _req(amount="1.5"))  # a string that reads as a number
    check_inputs(_plan(frozenset({"amount"})), _req(amount=None))
    check_inputs(_plan(spec=None), _req(entity={}))


def test_a_missing_join_key_is_refused_naming_its_feature_service() -> None:
    assert _refusal(_plan(), _req(entity={})) == "entity.customer_id: required by fraud_v1"


def test_a_join_key_of_the_wrong_type_is_refused() -> None:
    assert _refusal(_plan(), _req(entity={"customer_id": "seven"})).startswith(
        "entity.customer_id:"
    )


def test_a_missing_input_is_refused_unless_the_version_takes_one() -> None:
    message = "features.amount: required request-time input; this model cannot take a missing value"
    omitted = PredictRequest(model="m", entity={"customer_id": 7}, features={"count": 1.0})
    assert _refusal(_plan(), omitted) == message
    assert _refusal(_plan(), _req(amount=None)) == message
    assert _refusal(_plan(), _req(amount=float("nan"))) == message
    check_inputs(_plan(frozenset({"amount", "flag"})), omitted)


def test_a_boolean_only_for_a_boolean_input() -> None:
    assert (
        _refusal(_plan(), _req(count=True))
        == "features.count: expected an integer, got a boolean (true)"
    )
    assert (
        _refusal(_plan(), _req(amount=False))
        == "features.amount: expected a number, got a boolean (false)"
    )


def test_a_value_that_is_no_finite_number_is_refused() -> None:
    assert (
        _refusal(_plan(), _req(amount=float("inf")))
        == "features.amount: expected a finite number, got inf"
    )
    assert (
        _refusal(_plan(), _req(amount="lots"))
        == "features.amount: expected a number, got a string 'lots'"
    )
