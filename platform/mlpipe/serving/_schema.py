"""The ``/predict`` contract (DESIGN.md "Serving") as pydantic models.

Extend it, never break it: unknown request fields are ignored, responses only
gain fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

EntityValue = StrictInt | Annotated[StrictStr, Field(min_length=1, max_length=256)]
FeatureValue = Annotated[float, Field(allow_inf_nan=False)]


class PredictRequest(BaseModel):
    """One prediction request.

    ``entity`` holds the join keys the model's feature service reads (required;
    it may be ``{}`` for a model without one, and routing then hashes the
    request id). ``features`` holds request-time inputs. ``received_ns`` is set
    by the gateway (a client's value is overwritten) so the log can record the
    server-side latency; so are ``tenant`` and ``pin`` (the arm the tenant is
    pinned to, if any), from the auth layer.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    entity: dict[Annotated[str, Field(min_length=1, max_length=100)], EntityValue] = Field(
        max_length=16
    )
    features: dict[Annotated[str, Field(min_length=1, max_length=100)], FeatureValue] = Field(
        default_factory=dict, max_length=1000
    )
    request_id: Annotated[StrictStr, Field(min_length=1, max_length=128)] | None = None
    tenant: Annotated[StrictStr, Field(max_length=100)] = "default"
    received_ns: int = 0
    pin: Literal["champion", "canary"] | None = None


class PredictResponse(BaseModel):
    """The answer: which version and arm answered, at which deployment generation."""

    request_id: str
    model: str
    version: str
    arm: Literal["champion", "canary"]
    generation: int
    score: float
    label: int
    features_missing: list[str]
    cache_hit: bool = False


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """(field, readable message) for the first problem, e.g. ``("entity", "Field required")``."""
    err = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    parts = err["loc"][:2] if err["loc"][:1] in (("entity",), ("features",)) else err["loc"]
    loc = ".".join(str(p) for p in parts) or "body"
    return loc, f"{loc}: {err['msg']}"


__all__ = ["PredictRequest", "PredictResponse", "describe_validation_error"]
