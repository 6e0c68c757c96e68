"""What a request must bring for a version to score it, checked when it is admitted
(:meth:`~mlpipe.serving.ScoringPipeline.check`, before it joins a batch).

A join key must fit its entity's Feast type (:func:`~mlpipe.features.check_join_key`).
A missing input (omitted, ``null`` or NaN) is taken only where the version scores
one (``plan.nullable``); a boolean only for a boolean input. Finite floats for a
float-array version, the common case, are let through after one look at their types.
"""

from __future__ import annotations

import math
from typing import Any

from mlpipe.errors import InvalidInput
from mlpipe.features import check_join_key
from mlpipe.registry import missing_refused, number_from_text
from mlpipe.serving._generations import VersionPlan
from mlpipe.serving._schema import PredictRequest

_FLOAT = frozenset({float})


def check_inputs(plan: VersionPlan, req: PredictRequest) -> None:
    """Raise InvalidInput naming the first join key or input of ``plan`` that ``req``
    lacks or cannot give."""
    if plan.spec is not None:
        for key in plan.spec.join_keys:
            if key not in req.entity:
                raise InvalidInput(f"entity.{key}: required by {plan.spec.name}")
            check_join_key(key, req.entity[key], plan.spec.join_key_types.get(key))
    for name in plan.request_features:
        if name not in req.features and name not in plan.nullable:
            raise InvalidInput(missing_refused(name))
    # Typed inputs, or anything but finite floats: every value held to its input.
    if plan.frame_inputs is not None or not finite_floats(req.features):
        check_values(plan, req.features)


def finite_floats(features: dict[str, Any]) -> bool:
    """Whether every value is a finite float (the fast path's common case: nothing to check).

    A sum that overflows to inf only sends finite values to the full check.
    """
    values = features.values()
    return set(map(type, values)) <= _FLOAT and math.isfinite(sum(values))


def check_values(plan: VersionPlan, features: dict[str, Any]) -> None:
    """Hold each request-time value to its typed input (InvalidInput naming the field).

    Without typed inputs (a float-array version) every input is a number, and a
    string is one only if it reads as one (``"1.5"``, as ``/predict`` always took).
    An omitted input reaches here only where the version takes a missing value.
    """
    inputs = plan.frame_inputs
    for name in plan.request_features:
        value = features.get(name)
        if inputs is not None:
            inputs.check(name, value)
        else:
            _check_number(plan, name, value)


def _check_number(plan: VersionPlan, name: str, value: Any) -> None:
    """A float-array version's input: a finite number (or a string that reads as one),
    a boolean only for a boolean input, a missing value only where the model takes one."""
    if value is None or value != value:  # only NaN differs from itself
        if name not in plan.nullable:
            raise InvalidInput(missing_refused(name))
    elif type(value) is str:
        number_from_text(name, value)
    elif type(value) is bool:
        column = plan.inputs.column(name) if plan.inputs is not None else None
        if column is None or column.kind != "boolean":
            expected = column.expected if column is not None else "a number"
            raise InvalidInput(
                f"features.{name}: expected {expected}, got a boolean ({str(value).lower()})"
            )
    elif not math.isfinite(value):
        raise InvalidInput(f"features.{name}: expected a finite number, got {value!r}")


__all__ = ["check_inputs", "check_values", "finite_floats"]
