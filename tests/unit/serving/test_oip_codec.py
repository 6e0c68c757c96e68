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
    check_shared,
    decode_request,
    encode_response,
    header_length,
    model_metadata,
    outputs_of,
    request_rows,
    requested_outputs,
)
from mlpipe.tasks import TaskSpec

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


@pytest.mark.parametrize(
    ("tensor", "status", "says"),
    [
        # numpy holds at most 64 dimensions: reshape raised ValueError (a 500)
        ({"datatype": "FP64", "shape": [1] * 65, "data": [1.0]}, 400, "65 dimensions, at most 64"),
        # a dimension past what numpy indexes, with no data to fill it
        ({"datatype": "FP64", "shape": [0, 2**70], "data": []}, 400, "cannot hold the data"),
        # float(10**400) raised OverflowError (a 500)
        ({"datatype": "BYTES", "shape": [1], "data": [10**400]}, 422, "finite numbers"),
        ({"datatype": "BYTES", "shape": [1], "data": [-(10**400)]}, 422, "finite numbers"),
    ],
)
def test_hostile_tensors_are_a_4xx_naming_the_input(
    tensor: dict[str, Any], status: int, says: str
) -> None:
    body = _request([{"name": "amount", **tensor}])
    with pytest.raises(ProtocolError, match=f"^inputs.amount: .*{says}") as caught:
        request_rows(SERVED, decode_request(body, None), max_rows=10)
    assert caught.value.status == status
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value", ["²", "١٢", "12 ", "-1", "1e3", "9" * 5000])
def test_a_header_length_that_is_not_ascii_digits_is_a_400(value: str) -> None:
    # "²".isdigit() and "١٢".isdigit() are true, and int() refuses the first
    with pytest.raises(ProtocolError, match="^Inference-Header-Content-Length: not a byte count$"):
        header_length(value)


def test_a_header_length_of_ascii_digits_is_the_count() -> None:
    assert (header_length("12"), header_length(""), header_length(None)) == (12, None, None)


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


def _served(task: TaskSpec) -> SimpleNamespace:
    return SimpleNamespace(name="m", generation=2, primary_versions=lambda: [PLAN], task=task)


IRIS = TaskSpec("multiclass", (0, 1, 2))
WINE = TaskSpec("multiclass", ("barolo", "grignolino", "barbera"))
DIABETES = TaskSpec("regression")


@pytest.mark.parametrize(
    ("task", "outputs", "parameters"),
    [
        (TaskSpec(), [("score", "FP64", [-1]), ("label", "INT64", [-1])], {}),
        (
            IRIS,
            [("probabilities", "FP64", [-1, 3]), ("label", "INT64", [-1])],
            {"task": "multiclass", "classes": [0, 1, 2]},
        ),
        (
            WINE,
            [("probabilities", "FP64", [-1, 3]), ("label", "BYTES", [-1])],
            {"task": "multiclass", "classes": ["barolo", "grignolino", "barbera"]},
        ),
        (DIABETES, [("prediction", "FP64", [-1])], {"task": "regression"}),
    ],
)
def test_metadata_lists_the_outputs_of_the_deployed_task(
    task: TaskSpec, outputs: list[tuple[str, str, list[int]]], parameters: dict[str, Any]
) -> None:
    meta = model_metadata(_served(task))
    answered_by = [
        ("version", "BYTES", [-1]),
        ("arm", "BYTES", [-1]),
        ("request_id", "BYTES", [-1]),
    ]
    assert [(o["name"], o["datatype"], o["shape"]) for o in meta["outputs"]] == [
        *outputs,
        *answered_by,
    ]
    assert meta["parameters"] == {"generation": 2, **parameters}


def _multiclass_answers() -> list[dict[str, Any]]:
    probs = [
        {"barolo": 0.7, "grignolino": 0.2, "barbera": 0.1},
        {"barolo": 0.1, "grignolino": 0.3, "barbera": 0.6},
    ]
    return [
        {"label": label, "probabilities": p, "version": "5", "arm": "champion", "generation": 2}
        | {"request_id": f"r{i}"}
        for i, (label, p) in enumerate(zip(["barolo", "barbera"], probs, strict=True))
    ]


def test_multiclass_answers_become_a_probability_matrix_and_class_labels() -> None:
    outputs = outputs_of(WINE)
    body, headers = encode_response("m", {}, _multiclass_answers(), outputs)
    assert dict(headers)[b"content-type"] == b"application/json"
    out = {o["name"]: o for o in json.loads(body)["outputs"]}
    assert list(out) == ["probabilities", "label", "version", "arm", "request_id"]
    assert out["probabilities"]["shape"] == [2, 3]
    assert out["probabilities"]["data"] == [0.7, 0.2, 0.1, 0.1, 0.3, 0.6]
    assert out["label"] == {
        "name": "label",
        "datatype": "BYTES",
        "shape": [2],
        "data": ["barolo", "barbera"],
    }


def test_multiclass_outputs_in_binary_read_back_as_numpy() -> None:
    request = {"parameters": {"binary_data_output": True}}
    body, headers = encode_response("m", request, _multiclass_answers(), outputs_of(WINE))
    head_len = int(dict(headers)[b"inference-header-content-length"])
    head = json.loads(body[:head_len])
    offset, blobs = head_len, {}
    for o in head["outputs"]:
        size = o["parameters"]["binary_data_size"]
        blobs[o["name"]] = body[offset : offset + size]
        offset += size
    assert offset == len(body)
    probs = np.frombuffer(blobs["probabilities"], dtype="<f8").reshape(2, 3)
    assert probs.tolist() == [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]]
    assert blobs["label"] == struct.pack("<I", 6) + b"barolo" + struct.pack("<I", 7) + b"barbera"


def test_regression_answers_become_a_prediction_tensor() -> None:
    answers = [{"prediction": v, "version": "1", "generation": 2} for v in (1.5, 2.5)]
    request = {"outputs": [{"name": "prediction"}]}
    body, _ = encode_response("m", request, answers, outputs_of(DIABETES))
    (out,) = json.loads(body)["outputs"]
    assert out == {"name": "prediction", "datatype": "FP64", "shape": [2], "data": [1.5, 2.5]}


def test_an_output_the_task_does_not_have_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ProtocolError) as caught:
        requested_outputs({"outputs": [{"name": "score"}]}, outputs_of(DIABETES))
    assert str(caught.value) == (
        "outputs: unknown output(s) ['score']; known: prediction, version, arm, request_id"
    )
    assert caught.value.status == 400
    assert requested_outputs({}, outputs_of(IRIS)) == [
        "probabilities",
        "label",
        "version",
        "arm",
        "request_id",
    ]


def test_versions_of_different_tasks_cannot_share_a_tensor() -> None:
    answers = [*_multiclass_answers(), {"prediction": 3.0, "version": "6", "arm": "canary"}]
    with pytest.raises(ProtocolError, match="different tasks") as caught:
        encode_response("m", {}, answers, outputs_of(WINE))
    assert caught.value.status == 500


def test_outputs_the_answering_versions_do_not_share_are_refused_before_scoring() -> None:
    champion = SimpleNamespace(version="1", task=IRIS)
    canary = SimpleNamespace(version="2", task=DIABETES)
    served = SimpleNamespace(name="m", primary_versions=lambda: [champion, canary])
    check_shared(served, ["version", "arm"])  # who answered: fine with any tasks
    with pytest.raises(ProtocolError) as caught:
        check_shared(served, ["probabilities", "version"])
    assert caught.value.status == 500
    assert str(caught.value) == (
        "outputs ['probabilities']: the deployed versions of m predict differently "
        "(1: multiclass (3 classes), 2: regression); ask only for version, arm, request_id, "
        "or use /predict"
    )
    check_shared(SimpleNamespace(name="m", primary_versions=lambda: [champion]), ["label"])


def _typed_served() -> SimpleNamespace:
    from mlpipe.registry import InputColumn, InputSchema

    schema = InputSchema(
        (
            InputColumn("amount", "number", "float64", nullable=True),
            InputColumn("city", "string", "object", ("a", "b"), nullable=True),
        )
    )
    plan = SimpleNamespace(
        version="1",
        model=SimpleNamespace(features=["amount", "city"], input_schema=schema),
        request_features=("amount", "city"),
        spec=None,
    )
    return SimpleNamespace(name="m", generation=1, primary_versions=lambda: [plan])


def test_json_null_and_nan_are_missing_values_in_fp64_and_bytes() -> None:
    body = _request(
        [
            {"name": "amount", "datatype": "FP64", "shape": [2], "data": [1.5, None]},
            {"name": "city", "datatype": "BYTES", "shape": [2], "data": [None, "a"]},
        ]
    )
    rows = request_rows(_typed_served(), decode_request(body, None), max_rows=10)
    assert [r["features"] for r in rows] == [
        {"amount": 1.5, "city": None},
        {"amount": None, "city": "a"},
    ]
    nan = np.array([np.nan, 2.0], dtype="<f8").tobytes()
    head = _request(
        [
            {"name": "amount", "datatype": "FP64", "shape": [2]}
            | {"parameters": {"binary_data_size": len(nan)}}
        ]
    )
    rows = request_rows(_typed_served(), decode_request(head + nan, len(head)), max_rows=10)
    assert [r["features"]["amount"] for r in rows] == [None, 2.0]


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            {"name": "amount", "datatype": "FP64", "data": [True]},
            "inputs.amount: a number input (FP64), got a boolean (true)",
        ),
        (
            {"name": "amount", "datatype": "BOOL", "data": [True]},
            "inputs.amount: a number input (FP64), not BOOL",
        ),
        (
            {"name": "city", "datatype": "BYTES", "data": [1.5]},
            "inputs.city: a string input (BYTES), got 1.5",
        ),
        (
            {"name": "amount", "datatype": "FP64", "data": ["NaN"]},
            "inputs.amount: values must be finite numbers",
        ),
    ],
)
def test_a_boolean_for_a_number_or_a_number_for_a_string_is_a_422_naming_its_kind(
    tensor: dict[str, Any], message: str
) -> None:
    body = _request([{**tensor, "shape": [1]}])
    with pytest.raises(ProtocolError) as caught:
        request_rows(_typed_served(), decode_request(body, None), max_rows=10)
    assert (str(caught.value), caught.value.status) == (message, 422)
