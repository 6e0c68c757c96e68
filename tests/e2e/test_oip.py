"""The Open Inference Protocol (v2 REST) against a real server, with Triton's own client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import predlog_rows

pytestmark = pytest.mark.e2e

ROWS = [(80.0, 3), (250.5, 7), (12.0, 1)]


def _predict_scores(stack: Any) -> list[float]:
    scores = []
    for amount, n_items in ROWS:
        body = {"model": "fraud", "entity": {}, "features": {"amount": amount, "n_items": n_items}}
        r = stack.server.post(body)
        assert r.status_code == 200, r.text
        scores.append(r.json()["score"])
    return scores


@pytest.mark.nn  # tritonclient
def test_tritonclient_gets_the_predict_score(stack: Any) -> None:
    import tritonclient.http as triton

    client = triton.InferenceServerClient(url=stack.server.url.removeprefix("http://"))
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("fraud")
        meta = client.get_model_metadata("fraud")
        assert meta["versions"] == [stack.versions[1]]
        assert [i["name"] for i in meta["inputs"]] == ["amount", "n_items"]

        inputs = []
        for j, name in enumerate(("amount", "n_items")):
            tensor = triton.InferInput(name, [len(ROWS)], "FP64")
            tensor.set_data_from_numpy(np.array([row[j] for row in ROWS], dtype=np.float64))
            inputs.append(tensor)
        result = client.infer("fraud", inputs, request_id="oip-1")  # binary outputs, by default
        scores = result.as_numpy("score")
        labels = result.as_numpy("label")
        response = result.get_response()
    finally:
        client.close()

    assert scores.tolist() == pytest.approx(_predict_scores(stack), abs=1e-12)
    assert labels.dtype == np.int64 and set(labels.tolist()) <= {0, 1}
    assert response["model_version"] == stack.versions[1]
    logged = {r.request_id for r in predlog_rows(stack.settings)}
    assert {"oip-1-0", "oip-1-1", "oip-1-2"} <= logged  # the /predict log, row by row


def test_json_tensors_and_errors(stack: Any) -> None:
    url = f"{stack.server.url}/v2/models/fraud/infer"
    matrix = {
        "inputs": [
            {
                "name": "features",
                "datatype": "FP32",
                "shape": [3, 2],
                "data": [list(r) for r in ROWS],
            }
        ],
        "outputs": [{"name": "score"}, {"name": "version"}],
    }
    r = httpx.post(url, json=matrix, timeout=30)
    assert r.status_code == 200, r.text
    out = {o["name"]: o for o in r.json()["outputs"]}
    assert set(out) == {"score", "version"}
    assert out["score"]["data"] == pytest.approx(_predict_scores(stack), abs=1e-5)
    assert out["version"]["data"] == [stack.versions[1]] * 3

    def status(body: Any, path: str = "/v2/models/fraud/infer") -> int:
        return httpx.post(f"{stack.server.url}{path}", json=body, timeout=30).status_code

    one = {"name": "amount", "datatype": "FP64", "shape": [1], "data": [1.0]}
    assert status({"inputs": [one]}) == 422  # n_items missing: the gateway's own answer
    assert status({"inputs": [{**one, "name": "amount_typo"}]}) == 400
    assert status({"inputs": [{**one, "shape": [2]}]}) == 400
    assert status({"inputs": [one], "outputs": [{"name": "nope"}]}) == 400
    assert status({"inputs": [one]}, "/v2/models/nope/infer") == 404
    assert status({"inputs": [one]}, "/v2/models/fraud/versions/1/infer") == 400
    assert httpx.get(f"{stack.server.url}/v2/health/ready").status_code == 200
    assert httpx.get(f"{stack.server.url}/v2/models/nope").status_code == 404


def test_answers_match_the_documented_messages(stack: Any) -> None:
    from mlpipe.serving._oip_schema import InferenceResponse, ModelMetadata, openapi

    url = stack.server.url
    ModelMetadata.model_validate(httpx.get(f"{url}/v2/models/fraud", timeout=30).json())
    one = [
        {"name": "amount", "datatype": "FP64", "shape": [1], "data": [80.0]},
        {"name": "n_items", "datatype": "INT64", "shape": [1], "data": [3]},
    ]
    r = httpx.post(f"{url}/v2/models/fraud/infer", json={"id": "doc-1", "inputs": one}, timeout=30)
    assert r.status_code == 200, r.text
    assert InferenceResponse.model_validate(r.json()).id == "doc-1"

    doc = httpx.get(f"{url}/docs.json", timeout=30).json()
    paths, schemas = openapi("ErrorBody")
    assert set(paths) <= set(doc["paths"]) and set(schemas) <= set(doc["components"]["schemas"])
    assert "ErrorBody" in doc["components"]["schemas"]
    assert {"408", "415"} <= set(doc["paths"]["/predict"]["post"]["responses"])


def _binary(name: str, datatype: str, raw: bytes) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": [1],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    ).encode()
    return head + raw, {"inference-header-content-length": str(len(head))}


_AMOUNT = {"name": "amount", "datatype": "FP64", "shape": [1], "data": [1.0]}


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": []},
        {"inputs": [{**_AMOUNT, "shape": [-1]}]},
        {"inputs": [{**_AMOUNT, "datatype": "FP65"}]},
        {"inputs": [{**_AMOUNT, "datatype": "INT8", "data": [300]}]},  # out of range
        {"inputs": [{**_AMOUNT, "datatype": "BYTES", "data": ["x"]}]},  # not a number
        {"inputs": [{**_AMOUNT, "datatype": "BYTES", "data": [{"a": 1}]}]},
        {"inputs": [{**_AMOUNT, "shape": [2**40, 2**40], "data": []}]},
        {"inputs": [{**_AMOUNT, "shape": [1] * 65}]},  # numpy holds 64 dimensions at most
        {"inputs": [{k: v for k, v in _AMOUNT.items() if k != "data"}]},
        {"inputs": [{**_AMOUNT, "parameters": []}]},
        {"inputs": [_AMOUNT], "outputs": [{}]},
        {"inputs": [_AMOUNT], "parameters": 7},
    ],
)
def test_malformed_tensors_get_400_with_a_json_error(stack: Any, body: Any) -> None:
    r = httpx.post(f"{stack.server.url}/v2/models/fraud/infer", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["status"] == 400 and r.json()["error"]


@pytest.mark.parametrize(
    ("name", "datatype", "raw", "header"),
    [
        ("amount", "FP64", b"\x00" * 5, None),  # not a whole number of FP64s
        ("amount", "BYTES", b"\xff\x00\x00\x00ab", None),  # an element past the end
        ("amount", "BYTES", b"\x02\x00\x00\x00\xff\xfe", None),  # not UTF-8
        ("amount", "FP64", b"\x00" * 8, "twelve"),  # the header is not a byte count
    ],
)
def test_malformed_binary_tensors_get_400(
    stack: Any, name: str, datatype: str, raw: bytes, header: str | None
) -> None:
    body, headers = _binary(name, datatype, raw)
    if header is not None:
        headers["inference-header-content-length"] = header
    headers["content-type"] = "application/octet-stream"
    r = httpx.post(
        f"{stack.server.url}/v2/models/fraud/infer", content=body, headers=headers, timeout=30
    )
    assert r.status_code == 400, r.text
    assert r.json()["status"] == 400
