"""HTTP error bodies (``{"error": ..., "status": ..., "field": ...}``) and which status is which.

Every refusal on the request path answers with one of these; :func:`error_for`
is the one place an :class:`~mlpipe.errors.MlpipeError` becomes a status, and
:func:`model_error` the one place a model's failure on an input does.
"""

from __future__ import annotations

from typing import Any

from mlpipe.errors import InvalidInput, MlpipeError, NotFound


def error_body(message: str, status: int, field: str | None = None) -> dict[str, Any]:
    """The JSON body of an error answer; ``field`` names the request field at fault, if one is."""
    body: dict[str, Any] = {"error": message, "status": status}
    if field is not None:
        body["field"] = field
    return body


def error_for(exc: MlpipeError) -> dict[str, Any]:
    """The one place an mlpipe error becomes an HTTP error body (status from the class)."""
    message = str(exc)
    field = message.split(":", 1)[0] if isinstance(exc, InvalidInput) and ":" in message else None
    if isinstance(exc, NotFound | ModelUnavailable):
        field = "model"
    return error_body(message, exc.http_status, field)


class ModelUnavailable(MlpipeError):
    """The model is deployed, but this worker could not load it (503, naming why).

    Not :class:`~mlpipe.errors.NotFound`: the request is right, the server is not
    (a corrupt artifact, a package the model needs missing), and a client or load
    balancer should treat it as the server's failure, not its own mistake.
    """

    http_status = 503


class ModelFailure(RuntimeError):
    """The model answered, but not with one finite score per row."""


def model_error(exc: Exception) -> dict[str, Any]:
    """The error body of a request the model cannot score.

    scikit-learn, numpy and pandas raise ValueError for an input they reject
    (NaN, infinity, out of range), and a model wrapper that validates its
    inputs is expected to do the same: the input is the cause, 422, with the
    model's message. Anything else (an exception, or no finite score) is the
    server's failure: 500, naming only the exception class (the message, which
    may show internals, is logged).
    """
    if isinstance(exc, MlpipeError):
        return error_for(exc)
    if isinstance(exc, ValueError):
        return error_body(f"the model rejected this input: {str(exc)[:200]}", 422, "features")
    if isinstance(exc, ModelFailure):
        return error_body(f"the model returned {exc} for this input", 500)
    return error_body(f"the model failed on this input ({type(exc).__name__})", 500)


__all__ = ["ModelFailure", "ModelUnavailable", "error_body", "error_for", "model_error"]
