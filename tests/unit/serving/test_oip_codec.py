"""The Open Inference Protocol codec on its own: tensors in, ``/predict`` rows out, and back."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mlpipe.serving._oip_codec import (
    ProtocolError,
    decode_request,
    encode_response,
    model_metadata,
    request_rows,
    requested_outputs,
)

PLAN = SimpleNamespace(
    version="3",
    model=SimpleNamespace(features=["amount", "txn_count_1h", "n_items"]),
    request_features=("amount", "n_items"),
    spec=SimpleNamespace(join_keys=["customer_id"]),
)
SERVED = SimpleNamespace(name="fraud", generation=7, primary_versions=lambda: [PLAN])


def _request(inputs: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"inputs": inputs, **extra}).encode()


def test_metadata_lists_the_join_keys_and_request_time_features() -> None:
    meta = model_metadata(SERVED)
    assert meta["versions"] == ["3"]
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [
        ("customer_id", "INT64"),
        ("amount", "FP64"),
        ("n_items", "FP64"),
    ]
    assert meta["parameters"] == {"generation": 7}


def test_json_columns_become_one_predict_body_per_row() -> None:
    body = _request(
        [
            {"name": "customer_id", "datatype": "INT64", "shape": [2], "data": [1, 2]},
            {"name": "amount", "datatype": "FP64", "shape": [2, 1], "data": [[1.5], [2.5]]},
            {"name": "n_items", "datatype": "INT32", "shape": [2], "data": [3, 4]},
        ],
        id="r",
    )
    rows = request_rows(SERVED, decode_request(body, None), max_rows=10)
    assert rows == [
        {
            "model": "fraud",
            "entity": {"customer_id": 1},
            "features": {"amount": 1.5, "n_items": 3.0},
            "request_id": "r-0",
        },
        {
            "model": "fraud",
            "entity": {"customer_id": 2},
            "features": {"amount": 2.5, "n_items": 4.0},
            "request_id": "r-1",
        },
    ]


def test_a_features_matrix_and_binary_data_decode_like_json() -> None:
    matrix = np.array([[1.5, 3.0]], dtype="<f4").tobytes()
    key = struct.pack("<I", 2) + b"42"
    head = _request(
        [
            {
                "name": "customer_id",
                "datatype": "BYTES",
                "shape": [1],
                "parameters": {"binary_data_size": len(key)},
            },
            {
                "name": "features",
                "datatype": "FP32",
                "shape": [1, 2],
                "parameters": {"binary_data_size": len(matrix)},
            },
        ]
    )
    request = decode_request(head + key + matrix, len(head))
    (row,) = request_rows(SERVED, request, max_rows=10)
    assert row == {
        "model": "fraud",
        "entity": {"customer_id": "42"},
        "features": {"amount": 1.5, "n_items": 3.0},
    }


@pytest.mark.parametrize(
    ("inputs", "status", "says"),
    [
        ([{"name": "nope", "datatype": "FP64", "shape": [1], "data": [1]}], 400, "inputs.nope"),
        ([{"name": "amount", "datatype": "FP64", "shape": [2], "data": [1]}], 400, "1 values"),
        ([{"name": "amount", "datatype": "FP64", "shape": [1], "data": ["NaN"]}], 422, "finite"),
        ([{"name": "amount", "datatype": "FP64", "shape": [0], "data": []}], 400, "between 1"),
    ],
)
def test_bad_tensors_are_refused_with_the_field(
    inputs: list[dict[str, Any]], status: int, says: str
) -> None:
    with pytest.raises(ProtocolError, match=says) as caught:
        request_rows(SERVED, decode_request(_request(inputs), None), max_rows=10)
    assert caught.value.status == status


def test_malformed_json_is_a_400() -> None:
    with pytest.raises(ProtocolError, match="malformed JSON") as caught:
        decode_request(b'{"inputs": [', None)
    assert caught.value.status == 400


def test_answers_become_output_tensors_binary_where_asked() -> None:
    answers = [
        {"score": 0.25, "label": 0, "version": "3", "arm": "champion", "request_id": "a"},
        {"score": 0.75, "label": 1, "version": "4", "arm": "canary", "request_id": "b"},
    ]
    request = {
        "id": "r",
        "outputs": [{"name": "score", "parameters": {"binary_data": True}}, {"name": "arm"}],
    }
    body, headers = encode_response("fraud", request, [{**a, "generation": 7} for a in answers])
    head_len = int(dict(headers)[b"inference-header-content-length"])
    head = json.loads(body[:head_len])
    assert head["model_version"] == "3,4" and head["id"] == "r"
    assert head["parameters"] == {"generation": 7}
    score, arm = head["outputs"]
    assert arm == {"name": "arm", "datatype": "BYTES", "shape": [2], "data": ["champion", "canary"]}
    assert score["parameters"] == {"binary_data_size": 16}
    assert np.frombuffer(body[head_len:], dtype="<f8").tolist() == [0.25, 0.75]


def test_unknown_outputs_are_refused() -> None:
    assert requested_outputs({}) == ["score", "label", "version", "arm", "request_id"]
    with pytest.raises(ProtocolError, match="unknown output"):
        requested_outputs({"outputs": [{"name": "probability"}]})
