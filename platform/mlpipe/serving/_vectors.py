"""A request's input vector: the version's inputs in its order, from the store and the request.

One builder for both scoring paths. A version scored on a float array takes
every input as a float, a missing one as NaN, a store feature the store did
not have as its feature service's default (0.0 without one). A version scored
on a typed DataFrame takes each input as its column does (``column.check``),
a missing one as the column's empty value (NaN for any kind, as pandas reads
a gap), a store feature the store did not have as its default (empty without
one); a store value its column refuses fails the request (422), like a bad
request value. Both record which inputs were missing (the log row's
``features_missing``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from mlpipe.errors import InvalidInput


class InputSlot(NamedTuple):
    """One input of a version, in its scoring order, and how a value becomes the model's."""

    name: str
    take: Callable[[Any], Any]  # a present value as the model takes it; raises InvalidInput
    empty: Any  # a missing value
    default: Any  # a store feature missing, when its feature service names no default


def input_slots(model: Any, frame_inputs: Any | None) -> tuple[InputSlot, ...]:
    """A version's inputs: typed columns when it is scored on a DataFrame, else floats."""
    if frame_inputs is not None:
        return tuple(InputSlot(c.name, c.check, c.empty, None) for c in frame_inputs.columns)
    return tuple(InputSlot(name, float, math.nan, 0.0) for name in model.features)


@dataclass(slots=True)
class InputVector:
    """A request's inputs for one version, which were missing, and why it cannot be scored."""

    values: list[Any]
    missing: list[str]
    feature_hit: bool  # the store's row came from the feature cache
    error: InvalidInput | None = None  # a store value its typed column refuses


def build_vector(
    slots: tuple[InputSlot, ...],
    store_features: frozenset[str],
    defaults: Mapping[str, Any],
    features: Mapping[str, Any],
    row: Any,
) -> InputVector:
    """The input vector of a request with ``features`` and the store's ``row`` (None: no row).

    A request value that is null, omitted or NaN is missing (the gateway's
    check let it through only where the version takes one).
    """
    values: list[Any] = []
    missing: list[str] = []
    error: InvalidInput | None = None
    stored = row.values if row is not None else None
    row_missing = set(row.missing) if row is not None else ()
    for name, take, empty, default in slots:
        if name in store_features:
            value = stored.get(name) if stored is not None else None
            if stored is None or name in row_missing or value is None:
                missing.append(name)
                if value is None:
                    value = defaults.get(name, default)
            if value is None or value != value:  # only NaN differs from itself
                values.append(empty)
                continue
        else:
            value = features.get(name)
            if value is None or value != value:
                missing.append(name)
                values.append(empty)
                continue
        try:
            values.append(take(value))
        except InvalidInput as exc:
            error = exc
            values.append(empty)
    return InputVector(values, missing, bool(row is not None and row.cache_hit), error)


__all__ = ["InputSlot", "InputVector", "build_vector", "input_slots"]
