"""The one table from error class to HTTP status, and the error bodies built from it."""

from __future__ import annotations

import inspect
from http import HTTPStatus

import pytest

from mlpipe import errors
from mlpipe.errors import InvalidInput, MlpipeError, NotFound
from mlpipe.serving import _error_bodies, _oip_codec
from mlpipe.serving._error_bodies import (
    HTTP_STATUS,
    ModelFailure,
    ModelUnavailable,
    Overloaded,
    Refusal,
    error_for,
    model_failure,
    status_of,
)

ERRORS = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, MlpipeError)]


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_the_table_agrees_with_the_status_each_mlpipe_error_carries(cls: type[MlpipeError]) -> None:
    assert status_of(cls("x")) == cls.http_status


REFUSALS = [
    c
    for module in (_error_bodies, _oip_codec)
    for _, c in inspect.getmembers(module, inspect.isclass)
    if issubclass(c, Refusal) and c is not Refusal
]


@pytest.mark.parametrize("cls", REFUSALS, ids=lambda c: c.__name__)
def test_every_refusal_has_a_status_of_its_own(cls: type[Refusal]) -> None:
    """No refusal falls through to the base's 500 by being left out of the table."""
    assert any(base in HTTP_STATUS for base in cls.__mro__[: cls.__mro__.index(Refusal)])


def test_oip_refusals_take_the_status_of_their_kind() -> None:
    assert _oip_codec.ProtocolError("x").status == 400
    assert _oip_codec.InvalidTensor("x").status == 422
    assert _oip_codec.UnsharedOutputs("x").status == 500


def test_an_error_of_no_class_in_the_table_keeps_bentomls_status_or_is_500() -> None:
    class ServiceUnavailable(Exception):
        error_code = HTTPStatus.SERVICE_UNAVAILABLE

    assert status_of(ServiceUnavailable("process is overloaded")) == 503
    assert status_of(RuntimeError("boom")) == 500


def test_error_bodies_name_the_field_at_fault() -> None:
    assert error_for(InvalidInput("features.amount: missing")) == {
        "error": "features.amount: missing",
        "status": 422,
        "field": "features.amount",
    }
    assert error_for(NotFound("model 'x' is not deployed here"))["field"] == "model"
    assert error_for(ModelUnavailable("broken"))["field"] == "model"
    assert error_for(Overloaded("overloaded: 4 requests in flight")) == {
        "error": "overloaded: 4 requests in flight",
        "status": 503,
    }


def test_a_model_rejecting_an_input_is_422_and_failing_on_it_500() -> None:
    assert error_for(model_failure(ValueError("NaN"))) == {
        "error": "the model rejected this input: NaN",
        "status": 422,
        "field": "features",
    }
    assert error_for(model_failure(ModelFailure("2 scores for 1 row"))) == {
        "error": "the model returned 2 scores for 1 row for this input",
        "status": 500,
    }
    assert error_for(model_failure(KeyError("secret"))) == {
        "error": "the model failed on this input (KeyError)",
        "status": 500,
    }
    mine = InvalidInput("features.amount: no")
    assert model_failure(mine) is mine  # mlpipe's own error is kept as it is
