"""HTTP error bodies (``{"error": ..., "status": ..., "field": ...}``) and which status is which.

Every refusal on the request path is an error of a class in :data:`HTTP_STATUS`,
the one table from error class to HTTP status (the nearest class of an
error's MRO in it decides); :func:`error_for` turns one into its body, and
:func:`model_failure` decides which error a model's failure on an input is. The
classes of :mod:`mlpipe.errors` are in the table with the ``http_status`` they
carry (a test holds the two together); the serving edge's own refusals are
:class:`Refusal`'s subclasses, defined here.
"""

from __future__ import annotations

from typing import Any

from mlpipe.errors import (
    CheckFailed,
    Conflict,
    IntegrityError,
    InvalidInput,
    MlpipeError,
    NotFound,
    StoreUnavailable,
)


class Refusal(MlpipeError):
    """A request the serving edge answers with an error; ``field`` names the field at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    @property
    def status(self) -> int:
        """The HTTP status this refusal is answered with."""
        return status_of(self)


class MalformedRequest(Refusal):
    """Not JSON, a control character in a string the log keeps, or OIP tensors that do not fit."""


class Unauthenticated(Refusal):
    """No valid API key."""


class NoSuchEndpoint(Refusal):
    """A path (under ``/v2``) nothing answers."""


class BodyTooSlow(Refusal):
    """The body was not received within ``serving.request_timeout_s``."""


class BodyTooLarge(Refusal):
    """The body is over ``serving.max_body_bytes``."""


class UnsupportedMediaType(Refusal):
    """The body is not JSON (nor Triton's binary tensors on ``/v2``)."""


class InvalidRequest(Refusal):
    """The request breaks the contract, or the model rejects its input."""


class RateLimited(Refusal):
    """The tenant is over its rate limit."""


class ServerFailure(Refusal):
    """The server failed on the request (the server log has the details)."""


class NotReady(Refusal):
    """The worker's models are still loading."""


class Overloaded(Refusal):
    """The server holds as many scoring requests as it admits."""


class LogUnavailable(Refusal):
    """The prediction log cannot be written and ``predlog.on_write_error`` is ``fail_closed``."""


class TimedOut(Refusal):
    """The request was not answered within ``serving.request_timeout_s``."""


class ModelUnavailable(MlpipeError):
    """The model is deployed, but this worker could not load it (503, naming why).

    Not :class:`~mlpipe.errors.NotFound`: the request is right, the server is not
    (a corrupt artifact, a package the model needs missing), and a client or load
    balancer should treat it as the server's failure, not its own mistake.
    """

    http_status = 503


class ModelFailure(RuntimeError):
    """The model answered, but not with one finite score per row."""


HTTP_STATUS: dict[type[Exception], int] = {
    MalformedRequest: 400,
    Unauthenticated: 401,
    NotFound: 404,
    NoSuchEndpoint: 404,
    BodyTooSlow: 408,
    Conflict: 409,
    CheckFailed: 409,
    BodyTooLarge: 413,
    UnsupportedMediaType: 415,
    InvalidInput: 422,
    InvalidRequest: 422,
    RateLimited: 429,
    MlpipeError: 500,
    IntegrityError: 500,
    ServerFailure: 500,
    ModelFailure: 500,
    StoreUnavailable: 503,
    ModelUnavailable: 503,
    NotReady: 503,
    Overloaded: 503,
    LogUnavailable: 503,
    TimedOut: 504,
}


def status_of(exc: Exception) -> int:
    """The HTTP status of ``exc``: its nearest class in :data:`HTTP_STATUS`.

    An exception of no class there is answered with the status it carries as
    BentoML's exceptions do (``error_code``: the batcher's refusal when its queue
    is full is 503), else 500.
    """
    for cls in type(exc).__mro__:
        status = HTTP_STATUS.get(cls)
        if status is not None:
            return status
    code = getattr(exc, "error_code", None)
    try:
        return int(code) if code is not None else 500
    except (TypeError, ValueError):
        return 500


def error_body(message: str, status: int, field: str | None = None) -> dict[str, Any]:
    """The JSON body of an error answer; ``field`` names the request field at fault, if one is."""
    body: dict[str, Any] = {"error": message, "status": status}
    if field is not None:
        body["field"] = field
    return body


def error_for(exc: Exception) -> dict[str, Any]:
    """The one place an error becomes an HTTP error body (its status from :data:`HTTP_STATUS`)."""
    message = str(exc)
    if isinstance(exc, Refusal):
        field = exc.field
    elif isinstance(exc, NotFound | ModelUnavailable):
        field = "model"
    elif isinstance(exc, InvalidInput) and ":" in message:
        field = message.split(":", 1)[0]
    else:
        field = None
    return error_body(message, status_of(exc), field)


def model_failure(exc: Exception) -> MlpipeError:
    """The error of a request the model cannot score (its body: :func:`error_for`).

    scikit-learn, numpy and pandas raise ValueError for an input they reject
    (NaN, infinity, out of range), and a model wrapper that validates its
    inputs is expected to do the same: the input is the cause, 422, with the
    model's message. Anything else (an exception, or no finite score) is the
    server's failure: 500, naming only the exception class (the message, which
    may show internals, is logged).
    """
    if isinstance(exc, MlpipeError):
        return exc
    if isinstance(exc, ValueError):
        message = f"the model rejected this input: {str(exc)[:200]}"
        return InvalidRequest(message, "features")
    if isinstance(exc, ModelFailure):
        return ServerFailure(f"the model returned {exc} for this input")
    return ServerFailure(f"the model failed on this input ({type(exc).__name__})")


__all__ = [
    "HTTP_STATUS",
    "BodyTooLarge",
    "BodyTooSlow",
    "InvalidRequest",
    "LogUnavailable",
    "MalformedRequest",
    "ModelFailure",
    "ModelUnavailable",
    "NoSuchEndpoint",
    "NotReady",
    "Overloaded",
    "RateLimited",
    "Refusal",
    "ServerFailure",
    "TimedOut",
    "Unauthenticated",
    "UnsupportedMediaType",
    "error_body",
    "error_for",
    "model_failure",
    "status_of",
]
