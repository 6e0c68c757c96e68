"""The ``/predict`` contract (DESIGN.md "Serving") as pydantic models.

Extend it, never break it: unknown request fields are ignored, responses only
gain fields.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema

if TYPE_CHECKING:
    from mlpipe.serving._item import Together

# Strings the prediction log keeps carry no control character: the JSON schema says so
# (for clients and fuzzers), and the gateway refuses one with 400 (control_character_problem).
NO_CONTROL_CHARACTERS = r"^[^\x00-\x1f\x7f-\x9f]*$"
_TEXT: JsonDict = {"pattern": NO_CONTROL_CHARACTERS}
# An integer is a 64-bit one: what the log, the warehouse (BIGINT) and Feast's INT64 hold.
EntityValue = (
    Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]
    | Annotated[StrictStr, Field(min_length=1, max_length=256, json_schema_extra=_TEXT)]
)
# A number, a string for a model's string (categorical) input, a boolean, or null (NaN
# too) for a missing value; the pipeline's check holds each value to the version's input
# schema (a string or a boolean for a number input, a missing value the model cannot
# take, an infinite number: 422 naming the field). A boolean stays a boolean (strict), so
# `true` is never read as the number 1.
FeatureValue = (
    Annotated[float, Field(allow_inf_nan=True)]
    | StrictBool
    | Annotated[StrictStr, Field(max_length=1000, json_schema_extra=_TEXT)]
    | None
)
_ENTITY_NAMES: JsonDict = {"propertyNames": {"minLength": 1, "maxLength": 100, **_TEXT}}


class PredictRequest(BaseModel):
    """One prediction request.

    ``entity`` holds the join keys the model's feature services read (each one
    required there, ``entity.KEY`` 422 otherwise); for a model none of whose
    versions reads a feature service it may be left out or ``{}``, and sticky
    routing then hashes the request id (an entity given there routes instead).
    ``features`` holds request-time inputs (numbers; strings for
    a model's string inputs; ``true``/``false`` for its boolean inputs; ``null``,
    or an omitted key, for a missing value where the model takes one).
    ``received_ns`` is set by the gateway (a client's value is overwritten) so
    the log can record the server-side latency; so are ``tenant`` and ``pin``
    (the arm the tenant is pinned to, if any), from the auth layer.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    entity: dict[Annotated[str, Field(min_length=1, max_length=100)], EntityValue] = Field(
        default_factory=dict, max_length=16, json_schema_extra=_ENTITY_NAMES
    )
    features: dict[Annotated[str, Field(min_length=1, max_length=100)], FeatureValue] = Field(
        default_factory=dict, max_length=1000
    )
    request_id: (
        Annotated[StrictStr, Field(min_length=1, max_length=128, json_schema_extra=_TEXT)] | None
    ) = None
    tenant: Annotated[StrictStr, Field(max_length=100)] = "default"
    received_ns: int = 0
    pin: Literal["champion", "canary"] | None = None
    # The client request this is a row of (set by the protocol layer); not part of the
    # wire contract: a private attribute is neither read from a body nor in the schema.
    _together: Together | None = PrivateAttr(default=None)

    @property
    def together(self) -> Together | None:
        """The rows this request is one of (:class:`~mlpipe.serving._item.Together`), if any."""
        # read where pydantic keeps it: ``self._together`` is found only after a failed
        # lookup, through BaseModel.__getattr__, a few microseconds a row
        private = self.__pydantic_private__
        return None if private is None else private.get("_together")

    def joining(self, together: Together) -> PredictRequest:
        """A copy of this request as a row of ``together``."""
        row = self.model_copy()
        row._together = together
        return row


class PredictResponse(BaseModel):
    """The answer: which version and arm answered, at which deployment generation, and
    what it predicts, in the fields of its task (the others are absent, never null):

    - binary: ``score`` (P(class 1)) and ``label`` (0 or 1, at the version's threshold);
    - multiclass: ``label`` (the predicted class, as the version's classes name it: an
      integer or a string) and ``probabilities`` (class → probability, in class order);
    - regression: ``prediction`` (the predicted value).

    The server writes the answer with msgspec, not through this model: it is the
    contract ``/docs.json`` publishes, and what clients may validate against.
    """

    request_id: str
    model: str
    version: str
    arm: Literal["champion", "canary"]
    generation: int
    score: float | SkipJsonSchema[None] = None
    label: int | str | SkipJsonSchema[None] = None
    probabilities: dict[str, float] | SkipJsonSchema[None] = None
    prediction: float | SkipJsonSchema[None] = None
    features_missing: list[str]
    cache_hit: bool = False


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # what NO_CONTROL_CHARACTERS excludes


def control_character(text: str) -> str | None:
    """The first control character (C0, DEL or C1) in ``text`` as ``U+XXXX``, or None."""
    found = _CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def logged_strings(req: PredictRequest) -> list[tuple[str, str]]:
    """(field, text) of each string the prediction log keeps and the CLI shows: the request
    id, and the entity's names and string values."""
    strings = [("request_id", req.request_id or "")]
    for key, value in req.entity.items():
        strings.append((f"entity.{key}", key))
        if isinstance(value, str):
            strings.append((f"entity.{key}", value))
    return strings


def control_character_problem(req: PredictRequest) -> tuple[str, str] | None:
    """(field, message) for a control character in a string the prediction log would keep.

    The request id and the entity's names and string values are written to the
    log and loaded into the warehouse, where PostgreSQL refuses a NUL in text
    and terminals act on escape codes: such a request is refused (400), never
    logged.
    """
    for field, text in logged_strings(req):
        char = control_character(text)
        if char is not None:
            return field, f"{field}: control character {char} not allowed"
    return None


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """(field, readable message) for the first problem, e.g. ``("entity", "Field required")``.

    A feature value that is none of the kinds an input has (an array, an object)
    says so, and which kinds there are: the parse knows no model's inputs, the
    pipeline's check names each input's own.
    """
    err = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    parts = err["loc"][:2] if err["loc"][:1] in (("entity",), ("features",)) else err["loc"]
    loc = ".".join(str(p) for p in parts) or "body"
    if err["loc"][:1] == ("features",) and len(err["loc"]) == 3:  # a FeatureValue union
        return loc, _feature_value_problem(loc, exc)
    return loc, f"{loc}: {err['msg']}"


def _feature_value_problem(loc: str, exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_context=False)
    value = errors[0].get("input")
    if isinstance(value, str):  # too long: the string branch's own words
        said = next((e["msg"] for e in errors if e["type"].startswith("string")), None)
        return f"{loc}: {said or errors[0]['msg']}"
    kinds: dict[type, str] = {list: "an array", dict: "an object"}
    kind = kinds.get(type(value), type(value).__name__)
    return f"{loc}: a feature value is a number, a string, a boolean or null, not {kind}"


__all__ = [
    "NO_CONTROL_CHARACTERS",
    "PredictRequest",
    "PredictResponse",
    "control_character",
    "control_character_problem",
    "describe_validation_error",
]
