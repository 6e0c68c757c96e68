"""Cost of missing values (issue 28 item 1) on the float fast path, µs per request.

Old code inlined beside the new, 10 numeric features, best of 25 x 20,000 calls:
the gateway's value check (``ScoringPipeline.check``'s look at the values), the
input vector's missing test (``_vector``), and the pydantic parse of the
features (``number | string`` before; ``number | boolean | string | null`` now).
Run: ``.venv/bin/python bench/nullable_inputs.py``.
"""

from __future__ import annotations

import math
import timeit
from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictStr

from mlpipe.serving import PredictRequest

# The request model's feature type, read from the public model (bench imports no private module).
FeatureValue = PredictRequest.model_fields["features"].annotation.__args__[1]  # type: ignore[union-attr]
_FLOAT = {float}


def _finite_floats(features: dict[str, Any]) -> bool:
    """The serving pipeline's fast-path test (``_pipeline._finite_floats``), as written there."""
    values = features.values()
    return set(map(type, values)) <= _FLOAT and math.isfinite(sum(values))


NAMES = tuple(f"f{i}" for i in range(10))
FEATURES: dict[str, Any] = {n: float(i) + 0.5 for i, n in enumerate(NAMES)}
BODY = ('{"f": {' + ", ".join(f'"{n}": {v}' for n, v in FEATURES.items()) + "}}").encode()
OldValue = (
    Annotated[float, Field(allow_inf_nan=False)] | Annotated[StrictStr, Field(max_length=1000)]
)


class Old(BaseModel):
    f: dict[str, OldValue]


class New(BaseModel):
    f: dict[str, FeatureValue]


def old_check() -> bool:
    return str in map(type, FEATURES.values())


def new_check() -> bool:
    return not _finite_floats(FEATURES)


def old_vector() -> list[float]:
    out = []
    for name in NAMES:
        value = FEATURES.get(name)
        if value is None:
            value = math.nan
        out.append(float(value))
    return out


def new_vector() -> list[float]:
    out = []
    for name in NAMES:
        value = FEATURES.get(name)
        if value is None or value != value:
            value = math.nan
        out.append(float(value))
    return out


def old_parse() -> Any:
    return Old.model_validate_json(BODY)


def new_parse() -> Any:
    return New.model_validate_json(BODY)


def _us(fn: Any) -> float:
    return min(timeit.repeat(fn, number=20_000, repeat=25)) / 20_000 * 1e6


def main() -> None:
    total_old = total_new = 0.0
    print(f"{'piece':8s} {'before µs':>10s} {'now µs':>8s}")
    for piece, old, new in [
        ("check", old_check, new_check),
        ("vector", old_vector, new_vector),
        ("parse", old_parse, new_parse),
    ]:
        a, b = _us(old), _us(new)
        total_old, total_new = total_old + a, total_new + b
        print(f"{piece:8s} {a:10.3f} {b:8.3f}")
    print(f"{'total':8s} {total_old:10.3f} {total_new:8.3f}  (+{total_new - total_old:.3f} µs)")


if __name__ == "__main__":
    main()
