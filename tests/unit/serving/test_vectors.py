"""The one input-vector builder, on the float-array path and the typed (DataFrame) path."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from mlpipe.errors import InvalidInput
from mlpipe.serving._vectors import build_vector, input_slots


@dataclass
class Row:
    values: dict[str, Any]
    missing: list[str] = field(default_factory=list)
    cache_hit: bool = False


FLOATS = input_slots(SimpleNamespace(features=["avg", "count", "amount"]), None)
STORE = frozenset({"avg", "count"})


def test_float_inputs_in_the_models_order_with_store_defaults_and_nan_for_a_missing_one() -> None:
    v = build_vector(FLOATS, STORE, {"count": 3}, {"amount": "2.5"}, Row({"avg": 1}, ["count"]))
    assert v.values == [1.0, 3.0, 2.5]
    assert v.missing == ["count"] and v.error is None and not v.feature_hit
    v = build_vector(FLOATS, STORE, {}, {"amount": None}, None)  # no row from the store at all
    assert v.values[:2] == [0.0, 0.0] and math.isnan(v.values[2])
    assert v.missing == ["avg", "count", "amount"]
    hit = build_vector(FLOATS, STORE, {}, {"amount": 1.0}, Row({"avg": 1, "count": 2}, [], True))
    assert hit.feature_hit and hit.missing == []


class Column:
    """A typed input column: strings upper-cased, ``"bad"`` refused."""

    empty = None

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, value: Any) -> Any:
        if value == "bad":
            raise InvalidInput(f"features.{self.name}: not a city")
        return str(value).upper()


TYPED = input_slots(None, SimpleNamespace(columns=[Column("city"), Column("tier")]))


def test_typed_inputs_take_each_value_as_their_column_does() -> None:
    v = build_vector(TYPED, frozenset({"tier"}), {}, {"city": "oslo"}, Row({"tier": "gold"}))
    assert (v.values, v.missing, v.error) == (["OSLO", "GOLD"], [], None)
    v = build_vector(TYPED, frozenset({"tier"}), {}, {"city": float("nan")}, None)
    assert (v.values, v.missing) == ([None, None], ["city", "tier"])


def test_a_store_value_its_column_refuses_fails_the_request() -> None:
    v = build_vector(TYPED, frozenset({"city"}), {}, {"tier": "a"}, Row({"city": "bad"}))
    assert v.values == [None, "A"]
    assert isinstance(v.error, InvalidInput) and "not a city" in str(v.error)
