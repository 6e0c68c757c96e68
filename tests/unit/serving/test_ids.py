"""Names on the request path: new request ids, the worker's name, invisible characters."""

from __future__ import annotations

import os
import re

import pytest

from mlpipe.serving._ids import invisible_character_problem, new_request_id, worker_id
from mlpipe.serving._item import Together
from mlpipe.serving._schema import PredictRequest


def test_a_new_request_id_is_32_hex_digits_and_never_repeats() -> None:
    ids = [new_request_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_the_worker_is_named_after_its_process() -> None:
    assert worker_id() == f"w{os.getpid()}"


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (PredictRequest(model="m", request_id="a\u200bb"), "request_id"),
        (PredictRequest(model="m", entity={"customer_id": "x\u202ey"}), "entity.customer_id"),
    ],
)
def test_an_invisible_character_in_a_logged_string_is_named_by_field(
    req: PredictRequest, field: str
) -> None:
    problem = invisible_character_problem(req)
    assert problem is not None and problem[0] == field
    assert "invisible or bidirectional character U+" in problem[1]


def test_plain_ids_and_entities_have_no_problem() -> None:
    req = PredictRequest(model="m", request_id="r-1", entity={"customer_id": "café"})
    assert invisible_character_problem(req) is None


def test_a_request_knows_the_rows_it_is_one_of() -> None:
    req = PredictRequest(model="m", request_id="r")
    assert req.together is None
    together = Together(models={})
    row = req.joining(together)
    assert row.together is together and req.together is None  # a copy; the original untouched
